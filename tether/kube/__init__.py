"""The Kubernetes floor: the gateway (the only product code that imports ``kubernetes``), the API
types, the Kyma CR's views, Events and the per-runtime clients. Imports ``tether.base`` only."""
