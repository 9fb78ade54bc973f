"""Apache Kafka as the referee: its broker, Java clients and tools against pylog, and pylog against its broker."""
