"""Client quotas (Kafka's ClientQuotaManager and ClientRequestQuotaManager): byte rates and
request-time percentages per user and client id, measured over sampled windows; pure, time
passed in. `store.py` keeps them in the metadata store in Kafka's ZooKeeper layout."""
