"""The one exception tree of the service.

Every error raised by project code is a ``LedgerDeletionError``. Errors of the libraries underneath
(kazoo, botocore, httpx, pulsar) are translated into this tree where they are caught, with ``raise ... from``
so the cause stays visible. Activities hand the tree to Temporal through one decorator,
``activities._boundary.translate_errors``, which decides retryability in exactly one place::

    LedgerDeletionError
    ├── TransientError                 retried with backoff by Temporal
    │   ├── MetadataStoreUnavailable   ZooKeeper connection loss / timeouts
    │   ├── ObjectStoreUnavailable     S3 5xx, throttling, connection errors
    │   ├── AdminApiUnavailable        Pulsar admin 5xx, timeouts, connection errors
    │   │   └── RedirectRefused        a redirect out of the configured cluster, or not Pulsar's 307
    │   ├── MessagingUnavailable       Pulsar client send/ack failures
    │   ├── DeletionNotConfirmed       objects still visible after DeleteObjects
    │   ├── BucketNotFound             offload bucket not at the configured S3 endpoint / region
    │   ├── LedgersRootNotFound        the configured ledgers root is not BookKeeper's (no LAYOUT)
    │   ├── PulsarMetadataNotFound     the configured store holds no Pulsar metadata (schema locators)
    │   └── PauseStateUnknown          a deleting process has not read the kill switch lately
    ├── DeletionPaused                 the kill switch is on: not retried, the workflow waits for resume
    └── PermanentError                 never retried: the request goes to the dead-letter topic
        ├── InvalidRequestError        a message that cannot be a valid PendingDeleteLedgerInfo
        ├── MetadataFormatError        bytes that are not the format they claim to be
        ├── AuthorizationError         401/403 from a service
        ├── UnsupportedOffloadDriver   offload driver this service cannot delete from
        ├── ConfigurationError         settings that cannot work
        └── WorkflowStartRejected      Temporal refuses the request's start/signal (input too large, …)
"""

from __future__ import annotations


class LedgerDeletionError(Exception):
    """Base of every error raised by this project."""


class TransientError(LedgerDeletionError):
    """A failure that may go away on retry (I/O, availability)."""


class MetadataStoreUnavailable(TransientError):
    """ZooKeeper could not be reached or timed out."""


class ObjectStoreUnavailable(TransientError):
    """The S3-compatible object store answered 5xx, throttled, or could not be reached."""


class AdminApiUnavailable(TransientError):
    """The Pulsar admin REST API answered 5xx, timed out, or could not be reached."""


class RedirectRefused(AdminApiUnavailable):
    """The admin API redirected somewhere this service does not follow: not a 307, a scheme downgrade, or a
    host outside the configured cluster (a V1 global namespace owned by a peer cluster). Nothing is sent
    there. Retried like any admin failure (a broker that joined the cluster is listed on the next read of
    its broker list), then dead-lettered with this reason."""


class MessagingUnavailable(TransientError):
    """The Pulsar binary protocol client failed to send or acknowledge."""


class DeletionNotConfirmed(TransientError):
    """Objects were still visible after they were deleted (jclouds-style silent failure)."""


class BucketNotFound(TransientError):
    """The bucket an offload request points at is not there: S3 said NoSuchBucket, or redirected us elsewhere.

    Either the driver metadata names a bucket this endpoint does not have, or ``LEDGER_DELETION_S3_ENDPOINT``
    / ``_REGION`` point at the wrong store. Never "already deleted": that would ack the request and leave the
    objects for ever. Retried rather than dead-lettered at once: a replicated S3-compatible store may not know
    a new bucket on every node yet, and a wrong endpoint or region in our settings is fixed by a redeploy,
    after which the waiting retries succeed without a DLQ replay. A bucket that really is elsewhere exhausts
    the retries and the request lands in the dead-letter topic with this reason; nothing is deleted, and
    nothing acked as deleted, on the way.
    """


class LedgersRootNotFound(TransientError):
    """The configured ledgers root has no ``LAYOUT``, so it is not where BookKeeper keeps its ledgers.

    Every root BookKeeper formatted has one. Under any other path (a chroot left out of
    ``LEDGER_DELETION_ZOOKEEPER``, a wrong ``LEDGER_DELETION_BK_LEDGERS_ROOT``, Pulsar's metadata store where
    BookKeeper has its own) every ledger is "not found", and every request would be acked as already deleted
    while the orphans stay. Retried, then dead-lettered, like :class:`PulsarMetadataNotFound`.
    """


class PulsarMetadataNotFound(TransientError):
    """The store configured as Pulsar's metadata store holds none of it, so a reference cannot be checked.

    A schema ledger exists, so Pulsar once wrote ``/schemas`` into its metadata store; when that root is
    missing, the store read is not Pulsar's (``LEDGER_DELETION_PULSAR_METADATA_ZOOKEEPER`` unset where
    Pulsar's metadata lives apart from BookKeeper's). "No locator" would then mean "not referenced" and the
    ledger would be deleted unchecked. Retried like a missing bucket: a redeploy with the right setting lets
    the waiting retries succeed; otherwise the request lands in the dead-letter topic, nothing deleted.
    """


class PauseStateUnknown(TransientError):
    """A deleting process could not read the kill switch (``ledger-deletion pause``) recently enough to know
    it is off, so it deletes nothing: a process cut off from Temporal must not miss a pause. Retried."""


class TripwireStateUnknown(TransientError):
    """The shared-BookKeeper tripwire (``ledger_deletion.tripwire``) could not be read recently enough, or a
    trip could not be recorded: a ledger of a namespace this cluster does not know is then neither deleted nor
    acked as kept, since either would rest on a guess. Retried."""


class DeletionPaused(LedgerDeletionError):
    """The kill switch is on: a delete refused at its start. Neither retried by Temporal nor dead-lettered:
    the workflow waits, visibly (``DeletionStep=paused``), until ``ledger-deletion resume``. The message is
    the switch's note (who paused, when, why)."""


class PermanentError(LedgerDeletionError):
    """A failure that retrying cannot fix."""


class InvalidRequestError(PermanentError):
    """A message that does not decode, or decodes into something that cannot be a valid request."""


class MetadataFormatError(PermanentError):
    """Stored bytes that do not parse as the format they should be in."""


class AuthorizationError(PermanentError):
    """A service refused our credentials (401/403)."""


class UnsupportedOffloadDriver(PermanentError):
    """The offload driver named in the OffloadContext is not one this service can delete from: not S3, or an
    S3 endpoint or region other than the object store this service is configured for."""


class ConfigurationError(PermanentError):
    """Settings that cannot work together."""


class WorkflowStartRejected(PermanentError):
    """Temporal refuses to start (or signal) a request's workflow in a way no retry can change.

    A valid request can still be too large for Temporal once encoded, or be refused with INVALID_ARGUMENT;
    the ingest loop sends such a message to the dead-letter topic instead of retrying it for ever.
    """
