"""MQTT bus adapter (aiomqtt 2.x): schema-checked payloads, reconnects, per-agent credentials."""
