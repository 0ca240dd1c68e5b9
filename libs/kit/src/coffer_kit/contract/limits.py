"""The contract's limits (docs/contract.md §4, §5, §7), defined once for every service."""

from __future__ import annotations

# Files larger than this are refused with 413 file_too_large.
MAX_FILE_BYTES = 100 * 1024 * 1024
# Room for the multipart framing and the small form fields around a file of the maximum size.
MULTIPART_OVERHEAD = 1024 * 1024
# The largest upload request body (a file of the maximum size in its multipart form).
MAX_UPLOAD_BODY_BYTES = MAX_FILE_BYTES + MULTIPART_OVERHEAD
# A batch of change events edge's audit relay sends auth at once (auth reads that route's body
# up to it; the relay cuts its batches below it). One event is a few KiB at most (2 KiB of
# metadata, 32 tags, names, both sides of a change): a batch of the 64 KiB every other body is
# held to was passed by 70 of them, auth answered 413 for ever, and no organization's changes
# reached the audit log again.
AUDIT_BATCH_BYTES = 1024 * 1024
# A multipart boundary's length, in characters (RFC 2046 §5.1.1: 1 to 70); edge and blob
# refuse any other with 400. python-multipart's own bound (256) raised an error blob did not
# catch: a 500.
MAX_BOUNDARY_CHARS = 70

# A resumable upload (tus, CONTRACT §9) expires this long after its last write.
TUS_EXPIRY_SECONDS = 24 * 3600

# GET /api/assets: page size and offset.
PAGE_LIMIT_DEFAULT = 50
PAGE_LIMIT_MAX = 100
PAGE_OFFSET_DEFAULT = 0
# The largest offset (issue 49): skipping costs time in proportion to the skip, so deeper
# pages are read with a cursor (``nextCursor``); beyond it is 400.
PAGE_OFFSET_MAX = 100_000
# The longest cursor accepted (a name of 255 characters, escaped, fits many times over).
CURSOR_MAX_CHARS = 2048

# GET /api/assets/{id}/url: validity of a signed URL, in seconds (7 days at most).
EXPIRES_IN_DEFAULT = 3600
EXPIRES_IN_MIN = 1
EXPIRES_IN_MAX = 7 * 24 * 3600

# Folder and asset names, in characters after NFC normalisation.
MAX_NAME_CHARS = 255

# How deep folders nest (a folder at the root is 1 deep): creating or moving a folder past it
# is 409. Without a bound a chain past metadata's walk up the parent links (10,000) let a move
# make a cycle, and the dashboard's folder picker failed at about 960.
MAX_FOLDER_DEPTH = 100

# Folders one folder (or the root) holds: GET /api/folders answers a parent's children all at
# once, as the contract says, and 100,000 of them made it 43 MB and 10 s; past it, 409.
MAX_FOLDER_CHILDREN = 10_000

# The furthest expiry an API key may have: 10 years (a date past it, such as 9999-12-31, was
# a 500 when the day after was computed).
MAX_KEY_LIFETIME_DAYS = 3650

# Keys one organization may hold (its organization keys and the personal keys made in it):
# POST /api/keys beyond it is 409 (issue 46).
MAX_KEYS_PER_ORG = 100

# A password's length, in characters (auth refuses a longer one; the dashboard's forms pass one
# character more, never a password cut short).
PASSWORD_MAX_CHARS = 1024

# Issue 47: the trash and expiry.
# Days a deleted asset may stay in the trash (an organization's ``trashRetentionDays``, 0-90).
TRASH_RETENTION_DAYS_MAX = 90
# Trashed assets purged per ``DELETE /api/trash`` call (one batch; the caller repeats).
TRASH_PURGE_BATCH = 100
# How far ahead an asset's ``expiresAt`` may be.
ASSET_EXPIRY_MAX_DAYS = 3650
