"""docs/api.md, "Reading the records": the read contract of the stored records, the static
part of the generated reference (``listener.edge.apidoc`` appends it). Written from the code
that makes it true: ``listener.storage.records`` (the stored form), ``tether.wire.changes.compare``
and ``listener.storage.rules`` (ordering, retention), ``listener.fleet.epochs`` (epochs),
``listener.janitor`` (what removes objects); the library that implements the consumer's side
is ``tether.runtime.consumer``."""

from __future__ import annotations

TEXT = """\
## Reading the records

The listener's output is what it stores in the KCP: one `RuntimeConfigMap` object per watched
runtime object. Whoever acts on a runtime's configuration (Kyma's operators; Tether's own
configuration injector, `tether injector`) reads them with the Kubernetes API, a list then a
watch, and nothing else. This section is what a consumer may rely on. The Python library
`tether.runtime.consumer` keeps every rule below for you (relist, removed keys, resuming, bounded
memory, the nudge form): [consumers.md](consumers.md). An operator sees what is stored with
`tether records RUNTIME` ([operations.md](operations.md#tether-records-what-the-kcp-holds-for-a-runtime)).

### What is stored

Resource `runtimeconfigmaps.tether.kyma-project.io`, version `v1`, kind `RuntimeConfigMap`
(short name `rcm`). **One object per key** (runtime ID, Watch, namespace, name of the
runtime's object), named `rcm-` + 40 hex digits of SHA-256 over the key: select by labels and
read `spec`, do not compute names.

**Where**: in the storage namespace of its Watch (the Watch's `spec.storage.namespace`, set
at creation only), else in the listener's namespace (`TETHER_KCP_NAMESPACE`, `kcp-system`).
The Watch Tether ships, `configuration`, stores in `tether-configuration`. Records written
before Watches (no Watch label, "legacy") are in the listener's namespace until the janitor
removes them. An object with these labels anywhere else was not written by the listener
(the listener and the janitor ignore it): read only your Watch's storage namespace.

`spec` is **the latest accepted record** for the key: the state of the runtime's object as
last read by the webhook or the poller, never an older one (below).

| field of `spec` | meaning |
|---|---|
| `runtimeId`, `watch`, `namespace`, `name` | the key |
| `resource` | `group`, `version`, `kind` of the runtime's object (absent on a legacy record: a ConfigMap) |
| `uid`, `resourceVersion` | the object's UID and resourceVersion **in the runtime** (compare only within one epoch of one runtime; never your position in the KCP) |
| `observedAt` | when the sender read it (RFC 3339, UTC) |
| `deleted` | `true`: a tombstone (below) |
| `source` | `webhook` or `poller`: which path delivered this version |
| `epoch` | the runtime's epoch of the record (absent: 0; below) |
| `labels`, `annotations` | the runtime object's, as the Watch's send mode keeps them |
| `data`, `binaryData` | its values, as the Watch's send mode keeps them (`full`, `metadata`: none, `keys`, `exclude`, `digest`: `hmac-sha256:` (or, from a runtime without its key, `sha256:`) hashes only; a Secret's values are never sent: [watches.md](watches.md)) |

What a consumer may select on (labels of the stored object):

| label | value |
|---|---|
| `kyma-project.io/runtime-id` | the runtime ID (as on the Kyma CR) |
| `tether.kyma-project.io/watch` | the Watch that admitted the record (absent on a legacy record) |
| `operator.kyma-project.io/kyma-name` | the name of the runtime's Kyma CR (a record written before this label existed gets it at its next write) |
| `tether.kyma-project.io/namespace` | the runtime object's namespace |
| `app.kubernetes.io/managed-by` | `tether-listener` |

`tether.kyma-project.io/bucket` is the listener's own (state summaries). The annotations
`tether.kyma-project.io/{namespace,name,uid,resource-version,observed-at,deleted,epoch}`
repeat fields of `spec` so a metadata-only list (`PartialObjectMetadataList`) shows them;
`tether.kyma-project.io/size` is the object's size for the quota,
`tether.kyma-project.io/traceparent` the W3C trace of the write (docs/listener.md,
"Tracing"); `spec` is authoritative. A record in its Kyma CR's namespace has an
ownerReference to the Kyma CR (`controller: false`, no `blockOwnerDeletion`); owner
references cannot cross namespaces, so records in a storage namespace have none.

Consumers read, never write: the listener owns `spec` and its labels and annotations. It
keeps other labels, annotations and owner references on update, but a finalizer would hold
the janitor's deletions (below) until whoever set it removes it: do not add one.

### In which order

* **Per key, only forward.** The listener replaces a stored record only by a newer one
  (`tether.wire.changes.compare`: the higher epoch wins; within an epoch the runtime's
  resourceVersions compare as integers, else `observedAt`; a tombstone of the stored
  version is newer than it). An older record that arrives late is refused as `stale` and
  an equal one is not written (`duplicate`), so neither makes a watch event. The events of
  one object come in the KCP's resourceVersion order, each carrying a newer state than the
  one before.
* **Latest state, not every state.** Changes made in the runtime in quick succession may
  reach the KCP as one (the webhook coalesces, the poller sees only the current state), and
  a consumer that reads later sees only the last. Consume levels, not edges.
* **No order across keys.** Two objects changed one after the other in the runtime may be
  stored in the other order (webhook and poller paths, batches, listener replicas), and
  nothing orders one runtime against another. Do not infer anything from the order of
  events of different keys.
* **Your position** is the KCP's `metadata.resourceVersion` of the list and of each event
  (bookmarks included); `spec.resourceVersion` is the runtime's and orders nothing in the
  KCP.

### Tombstones

When an object is deleted in the runtime, or leaves its Watch (its labels no longer match
the selector), its record becomes a **tombstone**: the same object with `spec.deleted:
true`, no `data` or `binaryData`, and the `resourceVersion` of the
deletion (a collection resourceVersion read after it). A consumer removes what it derived
from that key. Tombstones stay for `TETHER_LISTENER_TOMBSTONE_RETENTION_SECONDS` (default
604800, 7 days) after their `observedAt`, plus an allowance for clock skew (a tenth of the
retention, at most 10 minutes); then the janitor deletes the object (a `DELETED` event).
The retention is what keeps a late, older record from bringing a deleted object back: a
record for a key that is not stored whose `observedAt` is older than the retention is
refused. An object that is deleted and a tombstone mean the same to a consumer: the key is
not live.

### What removes objects

Only these delete a `RuntimeConfigMap` (each a `DELETED` watch event):

* the janitor, a tombstone past the retention (above);
* the janitor, a record of a deleted Watch once its `observedAt` is past the retention
  (docs/listener.md, "Records of a deleted Watch"), and legacy records once their runtime
  delivers under Watches;
* the runtime's **Kyma CR deleted**: the records in the Kyma CR's namespace go at once
  with it (the API server's garbage collector, by the owner reference); every other record
  of the runtime goes by the janitor's orphan rule, once the Kyma CR has been gone for
  `TETHER_LISTENER_ORPHAN_GRACE_SECONDS` (default 86400, 24 h; a Kyma CR that comes back
  within the grace keeps them).

### Epochs: a runtime restored or rebuilt

A runtime's resourceVersions are comparable only while its history goes forward. When it
goes back (etcd restored from a snapshot, the cluster rebuilt under the same runtime ID),
the listener starts the runtime's next epoch
([architecture.md](architecture.md#when-history-goes-back-epochs-listenerfleetepochs)). What a consumer sees: the poller's next run resends every object the runtime holds
as records of the new epoch (`spec.epoch` higher: they replace the stored ones whatever
their resourceVersions, also when the values did not change), and every key the KCP holds
live that the restored runtime does not have becomes a tombstone of the new epoch. After
that run the stored records are the runtime's actual state. Nothing else marks the change:
a level-based consumer converges without knowing about epochs; one that compares
`spec.resourceVersion` must compare `spec.epoch` first.

### After a 410 Gone

A watch from a resourceVersion the KCP no longer holds (etcd compacted it; a consumer that
was stopped for long) is answered `410 Gone`, as the response or as an `ERROR` event. The
consumer must **relist** (a list gives the whole current state and a new resourceVersion),
treat **every key it held that the relist does not contain as removed** (it was deleted
while the consumer was not watching: a pruned tombstone, a removed runtime), then watch from
the list's resourceVersion. Ask for bookmarks (`allowWatchBookmarks=true`) and save the
bookmark's resourceVersion too: a Watch whose storage namespace changes rarely otherwise
keeps an old position that expires. `tether.runtime.consumer` does all of it (`Synced(relist=True)`
after the relist, removed keys as changes with `record: None`).

### Idempotent, level-based consumers

A consumer may see the same state more than once (every relist delivers every object
again; a consumer restarted from its saved position gets again what came after it) and may
never see an intermediate one. So it derives its output from the current live records of a
runtime (and writes it only when it differs), never from counting events. The configuration
injector (`tether injector`) is the reference: it merges the live records of a runtime in
(namespace, name) order into its target and applies the result only when it changed.

### Who may read what

RBAC cannot select by label, so a Watch's records are scoped by their namespace: a
**reader of a Watch** is a Role in the Watch's storage namespace granting `get`, `list`,
`watch` on `runtimeconfigmaps` (group `tether.kyma-project.io`), bound to the consumer's
ServiceAccount. The manifests ship `tether-records-reader` in `tether-configuration` for the
Watch `configuration` (`manifests/kcp/watches/records.yaml`). Watches that share a storage
namespace share their readers; a Watch without one stores in the listener's namespace,
where a reader sees every such Watch's records (and the legacy ones): give a Watch its own
storage namespace when one consumer alone may read it ([watches.md](watches.md)).
"""
