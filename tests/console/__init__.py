"""The web console: pages over HTTP, end to end in a headless chromium, against pylog and Apache Kafka."""
