"""The enroller (KCP): makes every Kyma CR's runtime connected and keeps it so: issues the
runtime's client certificate and the webhook's serving certificate from the watcher CA,
installs Tether's SKR objects into the runtime with server-side apply, repairs drift,
renews, removes Tether when the Kyma CR goes, and reports each runtime's state."""
