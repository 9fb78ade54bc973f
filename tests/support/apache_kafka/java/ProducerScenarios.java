/*
 * Apache Kafka's Java producer (and, for transactions, its consumer) against a broker, one scenario after another
 * in one JVM. Run by tests/peers/test_kafka_java_on_pylog.py with the pinned release's classpath.
 *
 * Usage: ProducerScenarios BOOTSTRAP SCENARIO ARGS... [-- SCENARIO ARGS...]...
 *   idempotent PREFIX COUNT
 *       one idempotent producer (acks=all) per codec (none, gzip, snappy, lz4, zstd) writes COUNT records to
 *       topic PREFIX-CODEC: key "k<i>", value "<codec>-v<i>-" + padding, header ("i", "<i>"), timestamp
 *       1700000000000 + i. Prints one line per record: {"scenario", "codec", "topic", "partition", "offset",
 *       "timestamp", "key", "value"}.
 *   transactional TOPIC TRANSACTIONAL_ID GROUP
 *       three transactions: "c0".."c9" with sendOffsetsToTransaction(TOPIC-0 -> 42, the group metadata of an
 *       unsubscribed consumer of GROUP) committed,
 *       "a0".."a9" aborted, "c10".."c14" committed. Prints {"scenario", "step": "sent", "outcome", "records"}
 *       per transaction, then one line per isolation.level (read_committed, read_uncommitted) with every record a
 *       consumer (assign, seekToBeginning, read to endOffsets) returns: {"scenario", "step": "consumed",
 *       "isolation", "records": [[partition, offset, key, value], ...]}. Between the two: a second producer
 *       with the same transactional id initializes, then the first tries one more transaction (a record
 *       "zombie" to partition 0, then abortTransaction after a failure): {"scenario", "step": "fenced",
 *       "error", "abort_error": the exceptions' simple class names, or "none"}.
 *
 * Output: JSON lines on stdout only (logging goes to stderr). A failure ends the JVM with a stack trace and a
 * non-zero exit.
 */

import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ProducerScenarios {
    static final ObjectMapper JSON = new ObjectMapper();
    static final long BASE_TS = 1_700_000_000_000L;

    static void emit(Object... kv) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) out.put((String) kv[i], kv[i + 1]);
        System.out.println(JSON.writeValueAsString(out));
        System.out.flush();
    }

    static Properties producerProps(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("acks", "all");
        p.put("enable.idempotence", "true");
        p.put("linger.ms", "20");
        p.put("delivery.timeout.ms", "30000");
        p.put("request.timeout.ms", "15000");
        return p;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        List<String> rest = new ArrayList<>(Arrays.asList(args).subList(1, args.length));
        while (!rest.isEmpty()) {
            int end = rest.indexOf("--");
            List<String> scenario = new ArrayList<>(end < 0 ? rest : rest.subList(0, end));
            rest = end < 0 ? new ArrayList<>() : new ArrayList<>(rest.subList(end + 1, rest.size()));
            switch (scenario.get(0)) {
                case "idempotent" -> idempotent(bootstrap, scenario.get(1), Integer.parseInt(scenario.get(2)));
                case "transactional" -> transactional(bootstrap, scenario.get(1), scenario.get(2), scenario.get(3));
                default -> throw new IllegalArgumentException("unknown scenario " + scenario.get(0));
            }
        }
    }

    static void idempotent(String bootstrap, String prefix, int count) throws Exception {
        for (String codec : List.of("none", "gzip", "snappy", "lz4", "zstd")) {
            String topic = prefix + "-" + codec;
            Properties props = producerProps(bootstrap);
            props.put("compression.type", codec);
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            List<ProducerRecord<String, String>> records = new ArrayList<>();
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
                for (int i = 0; i < count; i++) {
                    ProducerRecord<String, String> record = new ProducerRecord<>(
                        topic, null, BASE_TS + i, "k" + i, codec + "-v" + i + "-" + "x".repeat(i % 13));
                    record.headers().add(new RecordHeader("i", Integer.toString(i).getBytes(StandardCharsets.UTF_8)));
                    records.add(record);
                    sent.add(producer.send(record));
                }
                producer.flush();
            }
            for (int i = 0; i < count; i++) {
                RecordMetadata m = sent.get(i).get();
                emit("scenario", "idempotent", "codec", codec, "topic", m.topic(), "partition", m.partition(),
                     "offset", m.offset(), "timestamp", m.timestamp(), "key", records.get(i).key(),
                     "value", records.get(i).value());
            }
        }
    }

    static void transactional(String bootstrap, String topic, String transactionalId, String group) throws Exception {
        Properties props = producerProps(bootstrap);
        props.put("transactional.id", transactionalId);
        props.put("transaction.timeout.ms", "30000");
        int partitions;
        Properties groupProps = new Properties();
        groupProps.put("bootstrap.servers", bootstrap);
        groupProps.put("group.id", group);
        groupProps.put("key.deserializer", StringDeserializer.class.getName());
        groupProps.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props);
             KafkaConsumer<String, String> groupMember = new KafkaConsumer<>(groupProps)) {
            producer.initTransactions();
            partitions = producer.partitionsFor(topic).size();
            String[][] transactions = {{"c", "0", "10", "commit"}, {"a", "0", "10", "abort"}, {"c", "10", "15", "commit"}};
            for (String[] t : transactions) {
                producer.beginTransaction();
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                List<String> values = new ArrayList<>();
                for (int i = Integer.parseInt(t[1]); i < Integer.parseInt(t[2]); i++) {
                    String value = t[0] + i;
                    values.add(value);
                    sent.add(producer.send(new ProducerRecord<>(topic, i % partitions, "k" + i, value)));
                }
                if (t[0].equals("c") && t[1].equals("0")) {
                    producer.sendOffsetsToTransaction(
                        Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(42L, "txn-meta")),
                        groupMember.groupMetadata());
                }
                producer.flush();
                List<List<Object>> records = new ArrayList<>();
                for (int i = 0; i < sent.size(); i++) {
                    RecordMetadata m = sent.get(i).get();
                    records.add(List.of(m.partition(), m.offset(), values.get(i)));
                }
                if (t[3].equals("commit")) producer.commitTransaction();
                else producer.abortTransaction();
                emit("scenario", "transactional", "step", "sent", "outcome", t[3], "records", records);
            }
            // The same transactional id started again (a new instance of the application): the first is fenced.
            try (KafkaProducer<String, String> second = new KafkaProducer<>(props)) {
                second.initTransactions();
                String error = "none";
                String abortError = "none";
                try {
                    producer.beginTransaction();
                    producer.send(new ProducerRecord<>(topic, 0, "zombie", "zombie")).get();
                    producer.commitTransaction();
                } catch (Exception e) {
                    Throwable cause = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
                    error = cause.getClass().getSimpleName();
                    try {
                        producer.abortTransaction();  // what an application does after a failed send
                    } catch (Exception abort) {
                        abortError = abort.getClass().getSimpleName();
                    }
                }
                emit("scenario", "transactional", "step", "fenced", "error", error, "abort_error", abortError);
            }
        }
        for (String isolation : List.of("read_committed", "read_uncommitted")) {
            Properties c = new Properties();
            c.put("bootstrap.servers", bootstrap);
            c.put("key.deserializer", StringDeserializer.class.getName());
            c.put("value.deserializer", StringDeserializer.class.getName());
            c.put("isolation.level", isolation);
            c.put("enable.auto.commit", "false");
            List<List<Object>> records = new ArrayList<>();
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
                List<TopicPartition> tps = new ArrayList<>();
                for (PartitionInfo p : consumer.partitionsFor(topic)) tps.add(new TopicPartition(topic, p.partition()));
                consumer.assign(tps);
                consumer.seekToBeginning(tps);
                Map<TopicPartition, Long> ends = consumer.endOffsets(tps);
                long deadline = System.currentTimeMillis() + 20_000;
                while (!caughtUp(consumer, ends)) {
                    if (System.currentTimeMillis() > deadline) throw new IllegalStateException("consumer did not reach " + ends);
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                        records.add(List.of(r.partition(), r.offset(), r.key(), r.value()));
                    }
                }
                Map<String, Long> endsOut = new HashMap<>();
                ends.forEach((tp, off) -> endsOut.put(Integer.toString(tp.partition()), off));
                emit("scenario", "transactional", "step", "consumed", "isolation", isolation, "ends", endsOut,
                     "records", records);
            }
        }
    }

    static boolean caughtUp(KafkaConsumer<?, ?> consumer, Map<TopicPartition, Long> ends) {
        for (Map.Entry<TopicPartition, Long> e : ends.entrySet()) {
            if (consumer.position(e.getKey()) < e.getValue()) return false;
        }
        return true;
    }
}
