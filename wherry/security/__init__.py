"""Kafka's security model, I/O-free: principals, ACLs and their authorizer, SASL mechanisms
(PLAIN, SCRAM-SHA-256/512) and JAAS settings. The listening side (`server/`) and the outbound
side (`outbound/`) drive these; nothing here opens a socket or a file."""
