/*
 * Apache Kafka's AdminClient against a broker: every Admin call of the scenario in one JVM, in order. Run by
 * tests/peers/test_kafka_java_on_pylog.py with the pinned release's classpath.
 *
 * Usage: AdminScenarios BOOTSTRAP admin PREFIX DATA_TOPIC OFFSETS_GROUP TIMESTAMP
 *   PREFIX names what the scenario creates: topics PREFIX-a (3 partitions, retention.ms=3600000,
 *   cleanup.policy=compact) and PREFIX-b (1 partition, then 3, then deleted), the group PREFIX-active (one
 *   member, a consumer of DATA_TOPIC subscribed while the group calls run), the transactional id PREFIX-txn (a
 *   transaction left open on DATA_TOPIC-1, then aborted with abortTransaction) and ACLs for User:PREFIX-alice
 *   (deleted again) and User:PREFIX-bob (kept). DATA_TOPIC holds records (3 partitions); OFFSETS_GROUP has
 *   committed offsets on it (altered for partition 0 to 3, then the group is deleted). TIMESTAMP is asked of
 *   listOffsets (OffsetSpec.forTimestamp).
 *
 * Output: one JSON line per call on stdout, in call order: {"call": NAME, "result": ...} or, when the call's
 * future failed, {"call": NAME, "error": the cause's simple class name, "message": its message}. Logging goes to
 * stderr. An unexpected failure outside a call ends the JVM with a stack trace and a non-zero exit.
 */

import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.AbortTransactionSpec;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.DescribeProducersResult.PartitionProducerState;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class AdminScenarios {
    static final ObjectMapper JSON = new ObjectMapper();

    interface Call {
        Object run() throws Exception;
    }

    static Map<String, Object> obj(Object... kv) {
        Map<String, Object> out = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) out.put((String) kv[i], kv[i + 1]);
        return out;
    }

    /** Runs one Admin call and prints its line; returns its result (null when it failed). */
    static Object call(String name, Call body) throws Exception {
        Map<String, Object> line = obj("call", name);
        Object result = null;
        try {
            result = body.run();
            line.put("result", result);
        } catch (ExecutionException e) {
            Throwable cause = e.getCause() == null ? e : e.getCause();
            line.put("error", cause.getClass().getSimpleName());
            line.put("message", cause.getMessage());
        }
        System.out.println(JSON.writeValueAsString(line));
        System.out.flush();
        return result;
    }

    /** user -> {mechanism name: iterations} of a describeUserScramCredentials answer. */
    static Map<String, Object> scram(Map<String, UserScramCredentialsDescription> described) {
        Map<String, Object> out = new TreeMap<>();
        described.forEach((user, d) -> {
            Map<String, Object> infos = new TreeMap<>();
            d.credentialInfos().forEach(i -> infos.put(i.mechanism().mechanismName(), i.iterations()));
            out.put(user, infos);
        });
        return out;
    }

    static String tp(TopicPartition tp) {
        return tp.topic() + "-" + tp.partition();
    }

    static Map<String, Object> node(Node n) {
        return n == null ? null : obj("id", n.id(), "host", n.host(), "port", n.port(), "rack", n.rack());
    }

    static List<Integer> ids(List<Node> nodes) {
        List<Integer> out = new ArrayList<>();
        for (Node n : nodes) out.add(n.id());
        return out;
    }

    static Map<String, Object> configs(Map<ConfigResource, Config> described) {
        Map<String, Object> out = new TreeMap<>();
        described.forEach((resource, config) -> {
            Map<String, Object> entries = new TreeMap<>();
            for (ConfigEntry e : config.entries()) {
                entries.put(e.name(), obj("value", e.value(), "source", e.source().name(), "sensitive", e.isSensitive(),
                                          "read_only", e.isReadOnly()));
            }
            out.put(resource.type().name() + ":" + resource.name(), entries);
        });
        return out;
    }

    static Map<String, Object> offsets(Map<TopicPartition, ListOffsetsResultInfo> infos) {
        Map<String, Object> out = new TreeMap<>();
        infos.forEach((tp, info) -> out.put(tp(tp), List.of(info.offset(), info.timestamp())));
        return out;
    }

    static Map<String, Object> groupOffsets(Map<TopicPartition, OffsetAndMetadata> offsets) {
        Map<String, Object> out = new TreeMap<>();
        offsets.forEach((tp, om) -> out.put(tp(tp), om == null ? null : List.of(om.offset(), om.metadata())));
        return out;
    }

    static Map<String, Object> group(ConsumerGroupDescription d) {
        List<Object> members = new ArrayList<>();
        for (MemberDescription m : d.members()) {
            List<String> assigned = new ArrayList<>();
            for (TopicPartition tp : m.assignment().topicPartitions()) assigned.add(tp(tp));
            assigned.sort(null);
            members.add(obj("member_id", m.consumerId(), "client_id", m.clientId(), "host", m.host(),
                            "assignment", assigned));
        }
        return obj("group_id", d.groupId(), "state", d.groupState().toString(), "type", d.type().toString(),
                   "simple", d.isSimpleConsumerGroup(), "assignor", d.partitionAssignor(),
                   "coordinator", d.coordinator().id(), "members", members);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        if (!args[1].equals("admin")) throw new IllegalArgumentException("unknown scenario " + args[1]);
        String prefix = args[2];
        String data = args[3];
        String offsetsGroup = args[4];
        long timestamp = Long.parseLong(args[5]);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("default.api.timeout.ms", "20000");
        props.put("request.timeout.ms", "10000");
        try (Admin admin = Admin.create(props)) {
            run(admin, bootstrap, prefix, data, offsetsGroup, timestamp);
        }
    }

    static void run(Admin admin, String bootstrap, String prefix, String data, String offsetsGroup, long timestamp)
            throws Exception {
        String a = prefix + "-a";
        String b = prefix + "-b";
        List<TopicPartition> dataTps = List.of(
            new TopicPartition(data, 0), new TopicPartition(data, 1), new TopicPartition(data, 2));

        // --- cluster and topics
        call("describeCluster", () -> {
            var r = admin.describeCluster();
            List<Object> nodes = new ArrayList<>();
            for (Node n : r.nodes().get()) nodes.add(node(n));
            return obj("cluster_id", r.clusterId().get(), "controller", node(r.controller().get()), "nodes", nodes);
        });
        call("createTopics", () -> {
            var r = admin.createTopics(List.of(
                new NewTopic(a, 3, (short) 1).configs(Map.of("retention.ms", "3600000", "cleanup.policy", "compact")),
                new NewTopic(b, 1, (short) 1)));
            r.all().get();
            Map<String, Object> out = new TreeMap<>();
            for (String t : List.of(a, b)) {
                Map<String, String> cfg = new TreeMap<>();
                for (ConfigEntry e : r.config(t).get().entries()) cfg.put(e.name(), e.value());
                out.put(t, obj("partitions", r.numPartitions(t).get(), "replication_factor", r.replicationFactor(t).get(),
                               "topic_id", r.topicId(t).get().toString(), "configs", cfg));
            }
            return out;
        });
        call("createTopics.exists", () -> admin.createTopics(List.of(new NewTopic(a, 1, (short) 1))).all().get());
        call("listTopics", () -> new ArrayList<>(new java.util.TreeSet<>(admin.listTopics().names().get())));
        call("createPartitions", () -> admin.createPartitions(Map.of(b, NewPartitions.increaseTo(3))).all().get());
        call("describeTopics", () -> {
            Map<String, Object> out = new TreeMap<>();
            admin.describeTopics(List.of(a, b, data)).allTopicNames().get().forEach((name, d) -> {
                List<Object> parts = new ArrayList<>();
                for (TopicPartitionInfo p : d.partitions()) {
                    parts.add(obj("partition", p.partition(), "leader", p.leader() == null ? null : p.leader().id(),
                                  "replicas", ids(p.replicas()), "isr", ids(p.isr())));
                }
                out.put(name, obj("topic_id", d.topicId().toString(), "internal", d.isInternal(), "partitions", parts));
            });
            return out;
        });
        ConfigResource topicA = new ConfigResource(ConfigResource.Type.TOPIC, a);
        call("describeConfigs", () -> configs(admin.describeConfigs(List.of(topicA)).all().get()));
        call("incrementalAlterConfigs", () -> admin.incrementalAlterConfigs(Map.of(topicA, List.of(
            new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
            new AlterConfigOp(new ConfigEntry("cleanup.policy", ""), AlterConfigOp.OpType.DELETE),
            new AlterConfigOp(new ConfigEntry("min.insync.replicas", "1"), AlterConfigOp.OpType.SET)))).all().get());
        call("describeConfigs.altered", () -> configs(admin.describeConfigs(List.of(topicA)).all().get()));
        Node first = admin.describeCluster().nodes().get().iterator().next();
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, Integer.toString(first.id()));
        call("describeConfigs.broker", () -> configs(admin.describeConfigs(List.of(broker)).all().get()));

        // --- offsets and records
        for (var spec : List.of(List.of("earliest", OffsetSpec.earliest()), List.of("latest", OffsetSpec.latest()),
                                List.of("maxTimestamp", OffsetSpec.maxTimestamp()),
                                List.of("forTimestamp", OffsetSpec.forTimestamp(timestamp)))) {
            Map<TopicPartition, OffsetSpec> query = new HashMap<>();
            for (TopicPartition tp : dataTps) query.put(tp, (OffsetSpec) spec.get(1));
            call("listOffsets." + spec.get(0), () -> offsets(admin.listOffsets(query).all().get()));
        }
        call("deleteRecords", () -> {
            var r = admin.deleteRecords(Map.of(dataTps.get(0), RecordsToDelete.beforeOffset(5))).lowWatermarks();
            return r.get(dataTps.get(0)).get().lowWatermark();
        });
        call("listOffsets.earliest.after", () -> offsets(admin.listOffsets(Map.of(dataTps.get(0), OffsetSpec.earliest())).all().get()));

        // --- groups: one active member in PREFIX-active while the calls run
        String active = prefix + "-active";
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", active);
        c.put("client.id", prefix + "-member");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        c.put("partition.assignment.strategy", "org.apache.kafka.clients.consumer.RangeAssignor");
        try (KafkaConsumer<String, String> member = new KafkaConsumer<>(c)) {
            member.subscribe(List.of(data));
            long deadline = System.currentTimeMillis() + 20_000;
            while (member.assignment().isEmpty()) {
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("member of " + active + " got no assignment");
                member.poll(Duration.ofMillis(100));
            }
            call("listConsumerGroups", () -> listConsumerGroups(admin));
            call("listGroups", () -> {
                Map<String, Object> out = new TreeMap<>();
                for (GroupListing g : admin.listGroups(ListGroupsOptions.forConsumerGroups()).all().get()) {
                    out.put(g.groupId(), obj("state", g.groupState().map(Object::toString).orElse(null),
                                             "type", g.type().map(Object::toString).orElse(null),
                                             "protocol", g.protocol(), "simple", g.isSimpleConsumerGroup()));
                }
                return out;
            });
            call("describeConsumerGroups", () -> {
                Map<String, Object> out = new TreeMap<>();
                admin.describeConsumerGroups(List.of(active, offsetsGroup)).all().get()
                    .forEach((id, d) -> out.put(id, group(d)));
                return out;
            });
            call("listConsumerGroupOffsets", () -> groupOffsets(
                admin.listConsumerGroupOffsets(offsetsGroup).partitionsToOffsetAndMetadata().get()));
            call("alterConsumerGroupOffsets", () -> admin.alterConsumerGroupOffsets(
                offsetsGroup, Map.of(dataTps.get(0), new OffsetAndMetadata(3L, "altered"))).all().get());
            call("listConsumerGroupOffsets.altered", () -> groupOffsets(
                admin.listConsumerGroupOffsets(offsetsGroup).partitionsToOffsetAndMetadata().get()));
            call("deleteConsumerGroups.active", () -> admin.deleteConsumerGroups(List.of(active)).all().get());
            call("deleteConsumerGroups", () -> admin.deleteConsumerGroups(List.of(offsetsGroup)).all().get());
        }

        // --- transactions: one left open on DATA-1
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", prefix + "-txn");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        KafkaProducer<String, String> producer = new KafkaProducer<>(p);
        try {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(data, 1, "open", "left open")).get();
            TopicPartition open = dataTps.get(1);
            Object state = call("describeProducers", () -> {
                List<Object> out = new ArrayList<>();
                PartitionProducerState s = admin.describeProducers(List.of(open)).partitionResult(open).get();
                for (ProducerState ps : s.activeProducers()) {
                    out.add(obj("producer_id", ps.producerId(), "epoch", ps.producerEpoch(),
                                "last_sequence", ps.lastSequence(), "last_timestamp", ps.lastTimestamp(),
                                "coordinator_epoch", ps.coordinatorEpoch().orElse(-1),
                                "txn_start_offset", ps.currentTransactionStartOffset().orElse(-1L)));
                }
                return out;
            });
            call("listTransactions", () -> {
                Map<String, Object> out = new TreeMap<>();
                for (TransactionListing t : admin.listTransactions().all().get()) {
                    out.put(t.transactionalId(), obj("producer_id", t.producerId(), "state", t.state().toString()));
                }
                return out;
            });
            call("describeTransactions", () -> {
                TransactionDescription d = admin.describeTransactions(List.of(prefix + "-txn")).description(prefix + "-txn").get();
                List<String> parts = new ArrayList<>();
                for (TopicPartition tp : d.topicPartitions()) parts.add(tp(tp));
                return obj("coordinator", d.coordinatorId(), "state", d.state().toString(), "producer_id", d.producerId(),
                           "epoch", d.producerEpoch(), "timeout_ms", d.transactionTimeoutMs(), "partitions", parts);
            });
            call("abortTransaction", () -> {
                @SuppressWarnings("unchecked")
                Map<String, Object> mine = (Map<String, Object>) ((List<Object>) state).stream()
                    .filter(x -> ((Long) ((Map<?, ?>) x).get("txn_start_offset")) >= 0).findFirst().get();
                admin.abortTransaction(new AbortTransactionSpec(open, ((Number) mine.get("producer_id")).longValue(),
                    ((Number) mine.get("epoch")).shortValue(), ((Number) mine.get("coordinator_epoch")).intValue())).all().get();
                return null;
            });
            call("describeProducers.aborted", () -> {
                List<Object> out = new ArrayList<>();
                for (ProducerState ps : admin.describeProducers(List.of(open)).partitionResult(open).get().activeProducers()) {
                    out.add(obj("producer_id", ps.producerId(), "txn_start_offset", ps.currentTransactionStartOffset().orElse(-1L)));
                }
                return out;
            });
        } finally {
            producer.close(Duration.ZERO);
        }

        // --- log dirs, leaders
        call("describeLogDirs", () -> {
            Map<String, Object> out = new TreeMap<>();
            admin.describeLogDirs(List.of(first.id())).allDescriptions().get().forEach((brokerId, dirs) -> {
                Map<String, Object> byDir = new TreeMap<>();
                dirs.forEach((path, d) -> {
                    Map<String, Object> replicas = new TreeMap<>();
                    d.replicaInfos().forEach((tp, info) -> {
                        if (tp.topic().equals(data)) replicas.put(tp(tp), obj("size", info.size(), "lag", info.offsetLag(),
                                                                               "future", info.isFuture()));
                    });
                    byDir.put(path, obj("error", d.error() == null ? null : d.error().getClass().getSimpleName(),
                                        "replicas", replicas));
                });
                out.put(Integer.toString(brokerId), byDir);
            });
            return out;
        });
        call("electLeaders", () -> {
            Map<String, Object> out = new TreeMap<>();
            admin.electLeaders(ElectionType.PREFERRED, Set.of(new TopicPartition(a, 0))).partitions().get()
                .forEach((tp, error) -> out.put(tp(tp), error.map(e -> e.getClass().getSimpleName()).orElse(null)));
            return out;
        });

        // --- ACLs
        ResourcePattern topicPattern = new ResourcePattern(ResourceType.TOPIC, a, PatternType.LITERAL);
        AclBinding alice = new AclBinding(topicPattern, new AccessControlEntry("User:" + prefix + "-alice", "*", AclOperation.READ, AclPermissionType.ALLOW));
        AclBinding bob = new AclBinding(topicPattern, new AccessControlEntry("User:" + prefix + "-bob", "*", AclOperation.WRITE, AclPermissionType.DENY));
        AclBindingFilter onA = new AclBindingFilter(
            new ResourcePatternFilter(ResourceType.TOPIC, a, PatternType.LITERAL), AccessControlEntryFilter.ANY);
        call("createAcls", () -> admin.createAcls(List.of(alice, bob)).all().get());
        call("describeAcls", () -> acls(admin.describeAcls(onA).values().get()));
        call("deleteAcls", () -> acls(admin.deleteAcls(List.of(alice.toFilter())).all().get()));
        call("describeAcls.after", () -> acls(admin.describeAcls(onA).values().get()));

        // --- SCRAM users: PREFIX-carol set (the client salts the password), described, refused, deleted
        String carol = prefix + "-carol";
        call("alterUserScramCredentials", () -> admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(
            carol, new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), "carol-secret"))).all().get());
        call("describeUserScramCredentials", () -> scram(admin.describeUserScramCredentials(List.of(carol)).all().get()));
        call("describeUserScramCredentials.all", () -> new java.util.TreeSet<>(admin.describeUserScramCredentials().users().get()));
        call("alterUserScramCredentials.iterations", () -> admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(
            carol, new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 20000), "carol-secret"))).all().get());
        call("alterUserScramCredentials.delete", () -> admin.alterUserScramCredentials(List.of(
            new UserScramCredentialDeletion(carol, ScramMechanism.SCRAM_SHA_256))).all().get());
        call("describeUserScramCredentials.after", () -> admin.describeUserScramCredentials(List.of(carol)).users().get());

        // --- what pylog may not answer
        call("describeFeatures", () -> {
            FeatureMetadata f = admin.describeFeatures().featureMetadata().get();
            Map<String, Object> finalized = new TreeMap<>();
            f.finalizedFeatures().forEach((k, v) -> finalized.put(k, List.of(v.minVersionLevel(), v.maxVersionLevel())));
            Map<String, Object> supported = new TreeMap<>();
            f.supportedFeatures().forEach((k, v) -> supported.put(k, List.of(v.minVersion(), v.maxVersion())));
            return obj("finalized", finalized, "supported", supported, "epoch", f.finalizedFeaturesEpoch().orElse(-1L));
        });
        call("describeMetadataQuorum", () -> admin.describeMetadataQuorum().quorumInfo().get().leaderId());

        // --- last: delete PREFIX-b
        call("deleteTopics", () -> admin.deleteTopics(List.of(b)).all().get());
        call("listTopics.after", () -> new ArrayList<>(new java.util.TreeSet<>(admin.listTopics().names().get())));
    }

    /** The deprecated call (to be removed in Kafka 5; its replacement listGroups is called too). */
    @SuppressWarnings({"deprecation", "removal"})
    static Object listConsumerGroups(Admin admin) throws Exception {
        Map<String, Object> out = new TreeMap<>();
        for (ConsumerGroupListing g : admin.listConsumerGroups().all().get()) {
            out.put(g.groupId(), obj("state", g.groupState().map(Object::toString).orElse(null),
                                     "simple", g.isSimpleConsumerGroup()));
        }
        return out;
    }

    static List<Object> acls(Collection<AclBinding> bindings) {
        List<Object> out = new ArrayList<>();
        for (AclBinding x : bindings) {
            out.add(obj("resource", x.pattern().resourceType().name() + ":" + x.pattern().patternType().name() + ":" + x.pattern().name(),
                        "principal", x.entry().principal(), "host", x.entry().host(),
                        "operation", x.entry().operation().name(), "permission", x.entry().permissionType().name()));
        }
        out.sort((l, r) -> l.toString().compareTo(r.toString()));
        return out;
    }
}
