// A kafkajs group member (tests/interop/test_group_clients.py runs it with Node): joins GROUP, consumes TOPIC
// from the beginning (or from the group's committed offsets) until COUNT records arrived, commits them, leaves
// the group and prints one JSON line: {"values": [...], "partitions": {partition: [offsets]}}.
// Usage: node kafkajs_group_consumer.js BROKERS GROUP TOPIC COUNT
const { Kafka, logLevel } = require("kafkajs");

async function main() {
  const [brokers, groupId, topic, countText] = process.argv.slice(2);
  const count = Number(countText);
  const kafka = new Kafka({ clientId: "kafkajs-test", brokers: brokers.split(","), logLevel: logLevel.WARN });
  const consumer = kafka.consumer({ groupId, sessionTimeout: 6000, heartbeatInterval: 500, retry: { retries: 3 } });
  const values = [];
  const partitions = {};
  let finish;
  const done = new Promise((resolve) => (finish = resolve));
  const timer = setTimeout(() => finish(), 30000);
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      values.push(message.value.toString());
      (partitions[partition] = partitions[partition] || []).push(Number(message.offset));
      await consumer.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }]);
      if (values.length >= count) finish();
    },
  });
  await done;
  clearTimeout(timer);
  await consumer.disconnect();
  process.stdout.write(JSON.stringify({ values, partitions }) + "\n");
}

main().catch((error) => {
  process.stderr.write(`kafkajs consumer failed: ${error.stack || error}\n`);
  process.exit(1);
});
