/*
 * Apache Kafka's Java consumer against a broker, one scenario after another in one JVM. Run by
 * tests/peers/test_kafka_java_on_pylog.py with the pinned release's classpath.
 *
 * Usage: ConsumerScenarios BOOTSTRAP SCENARIO ARGS... [-- SCENARIO ARGS...]...
 *   classic TOPIC GROUP TIMESTAMP...
 *       the classic group protocol (group.protocol=classic, the range assignor, eager rebalances):
 *       consumer "a" subscribes to TOPIC, reads every record and commitSync()s; consumer "b" joins the group and
 *       both poll (one thread, in turn) until the rebalance gives each a non-empty share; "a" seeks to offset 5 of
 *       its first partition and reads from there; offsetsForTimes for each TIMESTAMP; beginningOffsets and
 *       endOffsets; "b" commits offset 7 with metadata "seven" for its first partition. Lines (JSON):
 *       {"step": "consumed", "records": [[partition, offset, timestamp, key, value], ...], "committed": {p: off}},
 *       {"step": "rebalanced", "a": [p...], "b": [p...], "b_positions": {p: off}, "generation_a", "generation_b",
 *        "member_a", "member_b", "events": ["a:revoked:[...]", ...]},
 *       {"step": "seek", "partition", "first_offset"},
 *       {"step": "offsets_for_times", "timestamp", "offsets": {p: [offset, timestamp] or null}},
 *       {"step": "ends", "beginning": {p: off}, "end": {p: off}},
 *       {"step": "committed", "partition", "offset": 7, "metadata"}.
 *   consumer TOPIC GROUP
 *       group.protocol=consumer (KIP-848): subscribe, poll until the topic is drained (at most 10 s), commit;
 *       prints {"step": "kip848", "error": exception class or null, "message", "records": polled,
 *       "partitions": assigned}.
 *   pattern PREFIX GROUP
 *       group.protocol=consumer with subscribe(SubscriptionPattern "PREFIX-.*"): polls until topic PREFIX-a is
 *       assigned, creates PREFIX-b (Admin), polls until it is assigned too (at most 10 s each); prints
 *       {"step": "pattern", "error", "message", "before": topics assigned first, "after": topics assigned then}.
 *
 *   assigned TOPIC COUNT
 *       no group: assign() every partition of TOPIC from the beginning (fetch.max.wait.ms 100) and poll until
 *       COUNT records came (at most 20 s); prints {"step": "assigned", "records": [[partition, offset], ...]}.
 *       The broker's fetch sessions (KIP-227) are the consumer's to use: the test evicts its session meanwhile.
 *
 * Output: JSON lines on stdout only (logging goes to stderr). A failure ends the JVM with a stack trace and a
 * non-zero exit.
 */

import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.Set;
import java.util.TreeSet;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ConsumerScenarios {
    static final ObjectMapper JSON = new ObjectMapper();

    static void emit(Object... kv) throws Exception {
        Map<String, Object> out = new java.util.LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) out.put((String) kv[i], kv[i + 1]);
        System.out.println(JSON.writeValueAsString(out));
        System.out.flush();
    }

    static Properties consumerProps(String bootstrap, String group, String clientId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("client.id", clientId);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("heartbeat.interval.ms", "100");
        p.put("session.timeout.ms", "10000");
        p.put("partition.assignment.strategy", "org.apache.kafka.clients.consumer.RangeAssignor");
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
                case "classic" -> classic(bootstrap, scenario.get(1), scenario.get(2), scenario.subList(3, scenario.size()));
                case "consumer" -> kip848(bootstrap, scenario.get(1), scenario.get(2));
                case "assigned" -> assigned(bootstrap, scenario.get(1), Integer.parseInt(scenario.get(2)));
                case "pattern" -> pattern(bootstrap, scenario.get(1), scenario.get(2));
                default -> throw new IllegalArgumentException("unknown scenario " + scenario.get(0));
            }
        }
    }

    static ConsumerRebalanceListener recorder(String who, List<String> events) {
        return new ConsumerRebalanceListener() {
            public void onPartitionsRevoked(Collection<TopicPartition> tps) {
                events.add(who + ":revoked:" + partitions(tps));
            }

            public void onPartitionsAssigned(Collection<TopicPartition> tps) {
                events.add(who + ":assigned:" + partitions(tps));
            }
        };
    }

    static List<Integer> partitions(Collection<TopicPartition> tps) {
        List<Integer> out = new ArrayList<>();
        for (TopicPartition tp : tps) out.add(tp.partition());
        out.sort(null);
        return out;
    }

    static Map<String, Long> byPartition(Map<TopicPartition, Long> offsets) {
        Map<String, Long> out = new TreeMap<>();
        offsets.forEach((tp, off) -> out.put(Integer.toString(tp.partition()), off));
        return out;
    }

    static void classic(String bootstrap, String topic, String group, List<String> timestamps) throws Exception {
        List<String> events = new ArrayList<>();
        try (KafkaConsumer<String, String> a = new KafkaConsumer<>(consumerProps(bootstrap, group, "a"));
             KafkaConsumer<String, String> b = new KafkaConsumer<>(consumerProps(bootstrap, group, "b"))) {
            List<TopicPartition> tps = new ArrayList<>();
            for (var p : a.partitionsFor(topic)) tps.add(new TopicPartition(topic, p.partition()));
            Map<TopicPartition, Long> ends = a.endOffsets(tps);
            long total = ends.values().stream().mapToLong(Long::longValue).sum();
            a.subscribe(List.of(topic), recorder("a", events));
            List<List<Object>> records = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 20_000;
            while (records.size() < total) {
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("read " + records.size() + " of " + total);
                for (ConsumerRecord<String, String> r : a.poll(Duration.ofMillis(100))) {
                    records.add(List.of(r.partition(), r.offset(), r.timestamp(), r.key(), r.value()));
                }
            }
            a.commitSync();
            Map<String, Long> committed = new TreeMap<>();
            a.committed(a.assignment()).forEach((tp, om) -> committed.put(Integer.toString(tp.partition()), om == null ? null : om.offset()));
            emit("step", "consumed", "records", records, "committed", committed);

            b.subscribe(List.of(topic), recorder("b", events));
            deadline = System.currentTimeMillis() + 30_000;
            while (true) {
                a.poll(Duration.ofMillis(50));
                b.poll(Duration.ofMillis(50));
                var sa = a.assignment();
                var sb = b.assignment();
                if (!sa.isEmpty() && !sb.isEmpty() && sa.size() + sb.size() == tps.size()
                        && a.groupMetadata().generationId() == b.groupMetadata().generationId()) break;
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("no rebalance: a=" + sa + " b=" + sb);
            }
            Map<String, Long> bPositions = new TreeMap<>();
            for (TopicPartition tp : b.assignment()) bPositions.put(Integer.toString(tp.partition()), b.position(tp));
            emit("step", "rebalanced", "a", partitions(a.assignment()), "b", partitions(b.assignment()),
                 "b_positions", bPositions, "generation_a", a.groupMetadata().generationId(),
                 "generation_b", b.groupMetadata().generationId(), "member_a", a.groupMetadata().memberId(),
                 "member_b", b.groupMetadata().memberId(), "events", events);

            TopicPartition first = a.assignment().stream().min((x, y) -> x.partition() - y.partition()).get();
            a.seek(first, 5);
            Long firstOffset = null;
            deadline = System.currentTimeMillis() + 20_000;
            while (firstOffset == null) {
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("nothing read after seek");
                b.poll(Duration.ZERO);
                for (ConsumerRecord<String, String> r : a.poll(Duration.ofMillis(100))) {
                    if (r.partition() == first.partition()) {
                        firstOffset = r.offset();
                        break;
                    }
                }
            }
            emit("step", "seek", "partition", first.partition(), "first_offset", firstOffset);

            for (String ts : timestamps) {
                Map<TopicPartition, Long> query = new java.util.HashMap<>();
                for (TopicPartition tp : tps) query.put(tp, Long.parseLong(ts));
                Map<String, Object> found = new TreeMap<>();
                a.offsetsForTimes(query).forEach((tp, ot) -> found.put(
                    Integer.toString(tp.partition()), ot == null ? null : List.of(ot.offset(), ot.timestamp())));
                emit("step", "offsets_for_times", "timestamp", Long.parseLong(ts), "offsets", found);
            }
            emit("step", "ends", "beginning", byPartition(a.beginningOffsets(tps)), "end", byPartition(a.endOffsets(tps)));

            TopicPartition bFirst = b.assignment().stream().min((x, y) -> x.partition() - y.partition()).get();
            b.commitSync(Map.of(bFirst, new OffsetAndMetadata(7L, "seven")));
            OffsetAndMetadata back = b.committed(java.util.Set.of(bFirst)).get(bFirst);
            emit("step", "committed", "partition", bFirst.partition(), "offset", back.offset(), "metadata", back.metadata());
        }
    }

    static void kip848(String bootstrap, String topic, String group) throws Exception {
        Properties p = consumerProps(bootstrap, group, "kip848");
        p.remove("heartbeat.interval.ms");
        p.remove("session.timeout.ms");
        p.remove("partition.assignment.strategy");
        p.put("group.protocol", "consumer");
        String error = null;
        String message = null;
        int records = 0;
        int partitions = 0;
        KafkaConsumer<String, String> c = new KafkaConsumer<>(p);
        try {
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 10_000;
            int idle = 0;
            // until the topic is drained: records came, then two empty polls in a row (or 10 s)
            while (System.currentTimeMillis() < deadline && !(records > 0 && idle >= 2)) {
                int n = c.poll(Duration.ofMillis(200)).count();
                records += n;
                idle = n == 0 ? idle + 1 : 0;
            }
            partitions = c.assignment().size();
            c.commitSync();
        } catch (Exception e) {
            error = e.getClass().getName();
            message = e.getMessage();
        } finally {
            c.close(CloseOptions.timeout(Duration.ofSeconds(1)));
        }
        emit("step", "kip848", "error", error, "message", message, "records", records, "partitions", partitions);
    }

    static void assigned(String bootstrap, String topic, int count) throws Exception {
        Properties p = consumerProps(bootstrap, "unused", "assigned");
        p.remove("group.id");
        p.put("fetch.max.wait.ms", "100");
        List<List<Long>> records = new ArrayList<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            List<TopicPartition> parts = new ArrayList<>();
            c.partitionsFor(topic).forEach(info -> parts.add(new TopicPartition(topic, info.partition())));
            c.assign(parts);
            c.seekToBeginning(parts);
            long deadline = System.currentTimeMillis() + 20_000;
            while (records.size() < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                    records.add(List.of((long) r.partition(), r.offset()));
                }
            }
        }
        emit("step", "assigned", "records", records);
    }

    static Set<String> pollUntilAssigned(KafkaConsumer<String, String> c, String topic) {
        long deadline = System.currentTimeMillis() + 10_000;
        Set<String> topics = new TreeSet<>();
        while (System.currentTimeMillis() < deadline && !topics.contains(topic)) {
            c.poll(Duration.ofMillis(100));
            topics.clear();
            for (TopicPartition tp : c.assignment()) topics.add(tp.topic());
        }
        return topics;
    }

    static void pattern(String bootstrap, String prefix, String group) throws Exception {
        Properties p = consumerProps(bootstrap, group, "pattern");
        p.remove("heartbeat.interval.ms");
        p.remove("session.timeout.ms");
        p.remove("partition.assignment.strategy");
        p.put("group.protocol", "consumer");
        String error = null;
        String message = null;
        Set<String> before = Set.of();
        Set<String> after = Set.of();
        KafkaConsumer<String, String> c = new KafkaConsumer<>(p);
        try {
            c.subscribe(new SubscriptionPattern(prefix + "-.*"));
            before = pollUntilAssigned(c, prefix + "-a");
            try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
                admin.createTopics(List.of(new NewTopic(prefix + "-b", 1, (short) 1))).all().get();
            }
            after = pollUntilAssigned(c, prefix + "-b");
        } catch (Exception e) {
            error = e.getClass().getName();
            message = e.getMessage();
        } finally {
            c.close(CloseOptions.timeout(Duration.ofSeconds(1)));
        }
        emit("step", "pattern", "error", error, "message", message, "before", before, "after", after);
    }
}
