"""The vectorized record codec: Kafka RecordBatches (magic 2) to and from Apache Arrow columns; sans-IO.

The connector's hot paths and the broker's produce validation, one concept a module:

=================  ================================================================================
``format``         the record format inside a batch, the decoded Arrow schema, varint math (one home)
``encode``         :func:`~.encode.build_batches`: Arrow columns -> batches (the writer)
``decode``         :func:`~.decode.decode_batches`: batches -> one Arrow RecordBatch (the reader);
                   :func:`~.decode.record_layout`: where every record lies (the log cleaner)
``scan``           :func:`~.scan.scan_records`: one batch's records checked (the produce path)
``walks``          which record walk runs, compiled or Python (:func:`~.walks.record_walk`)
``_recordwalk.c``  the compiled record walk and encoder (a C extension, built at install; optional)
``pywalk``         the Python record walk (numpy): the same entry points, checks and results
=================  ================================================================================

Invariants: both walks give the same results (tests/protocol/test_recordwalk.py and test_record_codec.py
compare them on random valid and damaged batches); corrupt input raises
:class:`~broker_runtime.errors.CorruptRecordError`, never garbage. The per-record reference reader and builder
(record by record, with Kafka's Java names) is :mod:`broker_runtime.protocol.records`.

Threading: every function is pure over immutable inputs and thread-safe; only the walk switch
(:func:`~.walks.numpy_walk`) is process-wide. Nothing here runs an event loop or does I/O.
"""
