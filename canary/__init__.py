"""The delivery canary (``tether canary``): a probe ConfigMap in one runtime, timed to the KCP."""
