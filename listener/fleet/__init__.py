"""The listener's fleet state: what it keeps of each runtime beside its records: heartbeat
Leases (``heartbeat``), epochs (``epochs``), delivery health (``deliveries``), the state
summary (``statesummary`` with ``summaryobject``) and the Kyma CR lookup (``runtimes``)."""
