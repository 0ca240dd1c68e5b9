"""The scrub (issue 47) on both drivers: objects written through the driver, then damaged
behind its back; the report names exactly what was done to the store, and nothing else."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from coffer_blob import cli
from coffer_blob.config import Settings
from coffer_blob.grants import revocation_key
from coffer_blob.scrub import Expected, ManifestError, RateLimit, read_manifest, scrub
from coffer_blob.storage import Storage, StorageUnavailable, make_driver
from coffer_blob.storage.fs import FsStorage
from coffer_blob.storage.s3 import S3Storage
from coffer_blob.transforms.presets import preset_key
from coffer_kit.contract.ids import ASSET, ORG, new_id

from .support import SECRET, TOKEN

HOUR = timedelta(hours=1)


@pytest.fixture(params=["fs", "s3"])
def storage_settings(request: pytest.FixtureRequest) -> Settings:
    name = "settings" if request.param == "fs" else "s3_settings"
    settings: Settings = request.getfixturevalue(name)
    return settings


@pytest.fixture
def storage(storage_settings: Settings) -> Any:
    driver = make_driver(storage_settings)
    yield driver
    driver.close()


def put(storage: Storage, key: str, data: bytes) -> Expected:
    """Store ``data`` under ``key`` as an upload does; the manifest line its row would give."""
    writer = storage.open_writer(key)
    writer.write(data)
    sha = hashlib.sha256(data).hexdigest()
    writer.commit(content_type="application/octet-stream", sha256=sha)
    org, asset, _ = key.split("/")
    return Expected(org=org, asset=asset, key=key, size=len(data), sha256=sha, state="asset")


def manifest_of(entries: list[Expected]) -> dict[str, Expected]:
    return read_manifest(manifest_lines(entries), max_entries=1000)


def manifest_lines(entries: list[Expected]) -> list[str]:
    """The lines ``coffer-metadata manifest`` writes for these rows, its end line last."""
    return [json.dumps(dataclasses.asdict(e)) for e in entries] + [
        json.dumps({"end": True, "count": len(entries), "at": datetime.now(UTC).isoformat()})
    ]


def corrupt(storage: Storage, key: str) -> None:
    """Flip a byte of the stored object behind the driver's back (same size, same metadata)."""
    if isinstance(storage, FsStorage):
        data_file = Path(storage._place(key).data)
        raw = bytearray(data_file.read_bytes())
        raw[0] ^= 0xFF
        data_file.write_bytes(bytes(raw))
        return
    assert isinstance(storage, S3Storage)
    head = storage.client.head_object(Bucket=storage.bucket, Key=key)
    body = bytearray(storage.client.get_object(Bucket=storage.bucket, Key=key)["Body"].read())
    body[0] ^= 0xFF
    storage.client.put_object(
        Bucket=storage.bucket,
        Key=key,
        Body=bytes(body),
        Metadata=head["Metadata"],
        ContentType=head["ContentType"],
    )


def a_store(storage: Storage) -> tuple[str, list[Expected]]:
    """An organization with three assets, a preset, a grant revocation, a variant and writes in
    progress."""
    org = new_id(ORG)
    entries = [put(storage, f"{org}/{new_id(ASSET)}/file-{i}.bin", bytes([i]) * (1000 + i)) for i in range(3)]
    put(storage, preset_key(org, "thumb"), b'{"w": 100}')  # not an asset's object
    put(storage, revocation_key(org, "A" * 22), b'{"revokedAt": 1}')  # nor is a grant revocation
    variant = f"{entries[0].key.rsplit('/', 1)[0]}/v%w=100"
    put(storage, variant, b"variant bytes")  # owned by its asset
    unfinished = storage.open_writer(f"{org}/{new_id(ASSET)}/in-flight.bin")  # never listed
    unfinished.write(b"half")
    resumable = storage.open_resumable(f"{org}/{new_id(ASSET)}/tus.bin", new_id("tus"), 0, {})
    resumable.write(b"part")
    resumable.checkpoint(4)
    return org, entries


def test_a_clean_store_reports_clean(storage: Storage) -> None:
    _, entries = a_store(storage)
    # Uploading: its bytes are published, its row not yet written (an intent in the manifest).
    org = entries[0].org
    uploading = put(storage, f"{org}/{new_id(ASSET)}/uploading.bin", b"u" * 10)
    # Just published, no intent listed either (the manifest was read first): young, not an orphan.
    put(storage, f"{org}/{new_id(ASSET)}/young.bin", b"y" * 10)
    lines = [*entries, Expected(uploading.org, uploading.asset, uploading.key, 0, "", "uploading")]
    report = scrub(storage, manifest_of(lines), verify=1.0, limit=RateLimit(10**9), orphan_age=HOUR)
    assert report.clean, report.human()
    assert (report.assets, report.verified, report.young_orphans) == (3, 3, 1)
    assert report.verified_bytes == sum(e.size for e in entries)


def test_one_missing_one_corrupt_one_orphan_are_reported_exactly(storage: Storage) -> None:
    _, entries = a_store(storage)
    kept, removed, damaged = entries
    storage.delete(removed.key)
    corrupt(storage, damaged.key)
    orphan = f"{kept.org}/{new_id(ASSET)}/nobody.bin"
    put(storage, orphan, b"o" * 33)
    later = datetime.now(UTC) + 2 * HOUR  # every object is older than the window by then

    report = scrub(
        storage, manifest_of(entries), verify=1.0, limit=RateLimit(10**9), orphan_age=HOUR, now=later
    )

    found = sorted((f.kind, f.org, f.asset, f.key) for f in report.findings)
    orphan_asset = orphan.split("/")[1]
    assert found == sorted(
        [
            ("missing", removed.org, removed.asset, removed.key),
            ("corrupt", damaged.org, damaged.asset, damaged.key),
            ("orphan", kept.org, orphan_asset, orphan),
        ]
    ), report.human()
    assert report.of("corrupt")[0].detail.startswith("sha256 ")
    assert storage.stat(orphan) is not None  # reported, not deleted

    again = scrub(
        storage,
        manifest_of(entries),
        verify=0.0,
        limit=RateLimit(10**9),
        orphan_age=HOUR,
        now=later,
        delete_orphans=True,
    )
    assert again.deleted_orphans == 1
    assert storage.stat(orphan) is None
    assert storage.stat(revocation_key(kept.org, "A" * 22)) is not None
    assert storage.stat(kept.key) is not None and storage.stat(damaged.key) is not None
    # Without hashing, the corrupt object (same size) is not seen; the missing one still is.
    assert sorted(f.kind for f in again.findings) == ["missing", "orphan"]


def test_a_size_mismatch_is_corrupt_without_reading(storage: Storage) -> None:
    _, entries = a_store(storage)
    shorter = dataclasses.replace(entries[1], size=entries[1].size - 1)
    report = scrub(
        storage,
        manifest_of([entries[0], shorter, entries[2]]),
        verify=0.0,
        limit=RateLimit(1),
        orphan_age=HOUR,
    )
    assert [(f.kind, f.asset) for f in report.findings] == [("corrupt", shorter.asset)]
    assert report.verified == 0


def test_a_trashed_or_any_asset_row_owns_its_object(storage: Storage) -> None:
    """Whatever state a row carries (a trashed asset's, say), its object is not an orphan."""
    _, entries = a_store(storage)
    trashed = dataclasses.replace(entries[0], state="trashed")
    later = datetime.now(UTC) + 2 * HOUR
    report = scrub(
        storage,
        manifest_of([trashed, *entries[1:]]),
        verify=1.0,
        limit=RateLimit(10**9),
        orphan_age=HOUR,
        now=later,
    )
    assert report.clean, report.human()


def test_flags_out_of_step_with_their_rows_are_reported_and_set_when_asked(storage: Storage) -> None:
    """A store copied later than the database (docs/backup.md): the CDN serves by the flags the
    objects carry, so a file its restored row calls private, or trashed, was served to anyone;
    and a live public one answered 404."""
    _, entries = a_store(storage)
    # The rows: public and live, private, in the trash. The store: private, public, live.
    rows = [
        dataclasses.replace(entries[0], private=False, trashed=False),
        dataclasses.replace(entries[1], private=True, trashed=False),
        dataclasses.replace(entries[2], private=False, trashed=True),
    ]
    storage.set_private(rows[0].key, True)

    def run(flags: str) -> Any:
        return scrub(storage, manifest_of(rows), verify=0.0, limit=RateLimit(1), orphan_age=HOUR, flags=flags)

    assert run("skip").clean  # (one stat an object: only when asked)
    checked = run("check")
    assert sorted((f.kind, f.asset, f.detail) for f in checked.findings) == sorted(
        [
            ("flags", rows[0].asset, "private true, the row says false"),
            ("flags", rows[1].asset, "private false, the row says true"),
            ("flags", rows[2].asset, "trashed false, the row says true"),
        ]
    ), checked.human()
    assert checked.fixed_flags == 0 and not storage.stat(rows[1].key).private  # reported only

    fixed = run("fix")
    assert fixed.fixed_flags == 3 and len(fixed.of("flags")) == 3
    stored = [storage.stat(row.key) for row in rows]
    assert [(info.private, info.trashed) for info in stored] == [(False, False), (True, False), (False, True)]
    assert run("check").clean


def fix_flags(storage: Storage, rows: list[Expected], manifest_at: datetime | None = None) -> Any:
    """A scrub with ``--flags fix`` of these rows alone, hashing nothing."""
    return scrub(
        storage,
        manifest_of(rows),
        verify=0.0,
        limit=RateLimit(1),
        orphan_age=HOUR,
        flags="fix",
        manifest_at=manifest_at,
    )


def test_fix_leaves_alone_flags_changed_around_or_after_the_manifest(storage: Storage) -> None:
    """On a live installation, making a file private changes the store first, then its row:
    a manifest read between the two calls it public, and ``fix`` made it public again while its
    row became private, served to anyone. A change made after the manifest was undone too. The
    store now keeps when an object's flags last changed, and ``fix`` sets only objects whose
    flags changed more than FLAGS_SETTLE before the manifest (a restore's)."""
    _, entries = a_store(storage)
    row = dataclasses.replace(entries[0], private=False, trashed=False)  # the row as the manifest read it
    storage.set_private(row.key, True)  # the change on its way: the store first
    changed = datetime.now(UTC)

    for manifest_at in (changed + timedelta(seconds=10), changed - timedelta(minutes=1)):
        report = fix_flags(storage, [row], manifest_at)
        (finding,) = report.of("flags")
        assert "private true, the row says false" in finding.detail
        assert "left as it is" in finding.detail, finding.detail
        assert (report.fixed_flags, report.left_flags) == (0, 1)
        assert storage.stat(row.key).private  # never made public
    assert "flags left as they are" in report.human()

    restored = fix_flags(
        storage, [row], changed + timedelta(hours=1)
    )  # a store copied an hour before the manifest
    assert (restored.fixed_flags, restored.left_flags) == (1, 0)
    assert not storage.stat(row.key).private


def set_flags_at(storage: Storage, key: str, unix_seconds: int) -> None:
    """Write the time an object's flags last changed, as a store holds it, by hand."""
    if isinstance(storage, FsStorage):
        sidecar = Path(storage._place(key).sidecar)
        sidecar.write_text(json.dumps({**json.loads(sidecar.read_text()), "flagsAt": unix_seconds}))
    else:
        head = storage.client.head_object(Bucket=storage.bucket, Key=key)
        storage.client.copy_object(
            Bucket=storage.bucket,
            Key=key,
            CopySource={"Bucket": storage.bucket, "Key": key},
            MetadataDirective="REPLACE",
            ContentType=head["ContentType"],
            Metadata={**head["Metadata"], "flags-at": str(unix_seconds)},
        )


def test_a_retried_flag_change_that_changes_nothing_still_protects_it_from_fix(storage: Storage) -> None:
    """A change to private stored its flag, then failed before its row; retried minutes later,
    the store already said private, so the retry wrote nothing and the flags kept the first
    attempt's time. A manifest read between the two (the row still public) then let ``fix``
    make the file public again under its now private row. A change that changes nothing now
    writes the time too, when the one stored is older than a minute (well within FLAGS_SETTLE)."""
    _, entries = a_store(storage)
    row = dataclasses.replace(entries[0], private=False, trashed=False)  # the row as the manifest read it
    storage.set_private(row.key, True)  # the first attempt: the store, then a failure
    set_flags_at(storage, row.key, int(time.time()) - 3600)  # an hour ago
    manifest_at = datetime.now(UTC) - timedelta(minutes=10)  # read between the two attempts
    storage.set_private(row.key, True)  # the retry: nothing to change in the store
    info = storage.stat(row.key)
    assert info is not None and info.flags_at is not None and info.flags_at > manifest_at
    report = fix_flags(storage, [row], manifest_at)
    assert (report.fixed_flags, report.left_flags) == (0, 1)
    assert storage.stat(row.key).private  # never made public

    # Within the minute, a change that changes nothing writes nothing (an S3 copy each time).
    set_flags_at(storage, row.key, stamp := int(time.time()) - 5)
    storage.set_held(row.key, False, "trash")
    assert storage.stat(row.key).flags_at == datetime.fromtimestamp(stamp, UTC)


def test_a_flag_time_no_clock_can_hold_is_no_time(storage: Storage) -> None:
    """A flag change's time the calendar cannot hold (a damaged sidecar, metadata set by hand)
    made ``stat`` raise, and the scrub stop with a traceback: it is now no time at all."""
    _, entries = a_store(storage)
    key = entries[0].key
    set_flags_at(storage, key, 10**20 if isinstance(storage, FsStorage) else int("9" * 14))
    info = storage.stat(key)
    assert info is not None and info.flags_at is None
    rows = [dataclasses.replace(e, private=False, trashed=False) for e in entries]
    assert scrub(
        storage, manifest_of(rows), verify=0.0, limit=RateLimit(1), orphan_age=HOUR, flags="check"
    ).clean


def test_an_object_copied_without_its_metadata_is_corrupt(s3_settings: Settings) -> None:
    """A store copy that drops S3's user metadata (the AWS CLI v1 copies an object over 8 MiB in
    parts without it): its bytes still hash to the row's, but it carries no sha256 or flags, so
    the CDN answers 404 for it. ``--flags check`` found nothing (the stat saw no object)."""
    storage = make_driver(s3_settings)  # (the fs driver's like: a damaged sidecar, below)
    assert isinstance(storage, S3Storage)
    _, entries = a_store(storage)
    stripped = entries[0]
    storage.client.copy_object(
        Bucket=storage.bucket,
        Key=stripped.key,
        CopySource={"Bucket": storage.bucket, "Key": stripped.key},
        MetadataDirective="REPLACE",
        Metadata={},
    )
    assert storage.stat(stripped.key) is None
    rows = [dataclasses.replace(e, private=False, trashed=False) for e in entries]
    report = scrub(
        storage, manifest_of(rows), verify=1.0, limit=RateLimit(10**9), orphan_age=HOUR, flags="check"
    )
    assert [(f.kind, f.key) for f in report.findings] == [("corrupt", stripped.key)], report.human()
    assert "without blob's metadata" in report.findings[0].detail


def test_an_object_that_cannot_be_read_is_corrupt_and_the_walk_goes_on(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk's EIO on one object was a traceback that lost every finding of the run."""
    _, entries = a_store(storage)
    failing, removed, _ = entries
    storage.delete(removed.key)
    opened = storage.open_reader

    def open_reader(key: str, *args: Any) -> Any:
        if key == failing.key:
            raise OSError(5, "Input/output error")  # what a failing disk's read raises
        return opened(key, *args)

    monkeypatch.setattr(storage, "open_reader", open_reader)
    report = scrub(storage, manifest_of(entries), verify=1.0, limit=RateLimit(10**9), orphan_age=HOUR)
    found = sorted((f.kind, f.asset, f.detail) for f in report.findings)
    assert found == [
        ("corrupt", failing.asset, "unreadable: [Errno 5] Input/output error"),
        ("missing", removed.asset, ""),
    ], report.human()
    assert report.verified == 1  # the one it could read


def test_a_damaged_sidecar_is_a_finding_never_an_orphan(settings: Settings) -> None:
    """fs only (the sidecar names the object): one emptied sidecar stopped every run with
    exit 2 and no report, the missing object beside it unreported."""
    storage = make_driver(settings)
    assert isinstance(storage, FsStorage)
    _, entries = a_store(storage)
    damaged, removed, kept = entries
    storage.delete(removed.key)
    Path(storage._place(damaged.key).sidecar).write_bytes(b"")
    later = datetime.now(UTC) + 2 * HOUR

    report = scrub(
        storage,
        manifest_of(entries),
        verify=1.0,
        limit=RateLimit(10**9),
        orphan_age=HOUR,
        now=later,
        delete_orphans=True,
    )
    found = sorted((f.kind, f.asset, f.key) for f in report.findings)
    # The damaged object cannot be served (its name is unknown): its asset is missing too.
    assert found == sorted(
        [
            ("corrupt", damaged.asset, f"{damaged.org}/{damaged.asset}/"),
            ("missing", damaged.asset, damaged.key),
            ("missing", removed.asset, removed.key),
        ]
    ), report.human()
    assert "is unreadable" in report.of("corrupt")[0].detail
    assert report.deleted_orphans == 0
    assert Path(storage._place(damaged.key).data).exists()  # left for an operator
    assert storage.stat(kept.key) is not None


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_rate_limit_never_lets_more_through_than_the_rate() -> None:
    """The limiter's accounting on a clock the test drives: whatever the reads cost, the bytes
    taken by any moment are at most rate × elapsed + one chunk."""
    t = FakeTime()
    limit = RateLimit(1000, clock=t.clock, sleep=t.sleep)
    start = t.now
    for i in range(200):
        t.now += 0.01 * (i % 3)  # reading itself takes some time, sometimes none
        limit.take(100)
        assert limit.bytes <= 1000 * (t.now - start) + 100
    assert limit.bytes == 20_000
    assert t.now - start == pytest.approx(20.0, rel=0.01)  # 20 000 bytes at 1000/s
    # An idle spell earns no burst: after 50 s doing nothing, only the first chunk goes at once.
    t.now += 50
    before = t.now
    for _ in range(10):
        limit.take(100)
    assert t.now - before == pytest.approx(0.9)


def test_the_scrub_reads_within_its_bound(storage: Storage) -> None:
    """The real scrub's hashing goes through the limiter: its accounting at a low bound."""
    _, entries = a_store(storage)
    t = FakeTime()
    limit = RateLimit(2000, clock=t.clock, sleep=t.sleep)
    scrub(storage, manifest_of(entries), verify=1.0, limit=limit, orphan_age=HOUR)
    total = sum(e.size for e in entries)
    assert limit.bytes == total
    biggest = max(e.size for e in entries)
    assert limit.waited >= (total - biggest) / 2000


def _command_env(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> None:
    """What ``coffer-blob scrub`` reads of its store from the environment."""
    for name, value in {
        "COFFER_MODE": "local",
        "COFFER_DATA_DIR": str(settings.data_dir),
        "COFFER_BLOB_DIR": str(settings.blob_dir),
        "COFFER_INTERNAL_TOKEN": TOKEN,
        "COFFER_SIGNING_SECRET": SECRET,
    }.items():
        monkeypatch.setenv(name, value)


def test_a_manifest_cut_short_is_refused_before_anything_is_deleted(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest without its end line (the dump crashed, the disk filled, the pipe broke) or
    with fewer entries than its end line counts: every object it leaves out would be an
    orphan, deleted under --delete-orphans (3 of 4 live assets' bytes, in the audit). Refused
    (exit 2), and every object stays."""
    storage = make_driver(settings)
    _, entries = a_store(storage)
    _command_env(monkeypatch, settings)
    whole = manifest_lines(entries)
    manifest = tmp_path / "manifest.jsonl"
    for cut in (whole[:1], whole[:-1], [], [*whole[:1], whole[-1]], [*whole, whole[0]]):
        with pytest.raises(ManifestError):
            read_manifest(cut, max_entries=10)
        manifest.write_text("".join(line + "\n" for line in cut))
        assert cli.main(["scrub", "--manifest", str(manifest), "--delete-orphans", "--orphan-age", "0"]) == 2
        assert all(storage.stat(e.key) is not None for e in entries)
    manifest.write_text("".join(line + "\n" for line in whole))
    assert cli.main(["scrub", "--manifest", str(manifest), "--delete-orphans", "--orphan-age", "0"]) == 0


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        ((), b'{"org": "o", "asset": "a", "key": "o/a/f", "size": 1e400}'),
        ((), b"[" * 5000),
        ((), b"\xff\xfe"),
        (("--orphan-age", "nan"), None),
        (("--orphan-age", "1e12"), None),
    ],
)
def test_a_bad_manifest_or_argument_is_exit_2_not_a_finding(
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: tuple[str, ...],
    line: bytes | None,
) -> None:
    """Exit 1 means "problems found" to an alert; a manifest or argument the scrub cannot use
    was a traceback (exit 1): OverflowError, RecursionError, NaN."""
    _command_env(monkeypatch, settings)
    manifest = tmp_path / "manifest.jsonl"
    end = b'{"end": true, "count": %d}\n' % (1 if line else 0)
    manifest.write_bytes((line + b"\n" if line else b"") + end)
    assert cli.main(["scrub", "--manifest", str(manifest), *argv]) == 2


def test_a_malformed_manifest_is_refused() -> None:
    with pytest.raises(ManifestError, match="line 2"):
        read_manifest(['{"org": "o", "asset": "a", "key": "o/a/f"}', "not json"], max_entries=10)
    with pytest.raises(ManifestError, match="more than 1"):
        read_manifest(
            ['{"org": "o", "asset": "a", "key": "k"}', '{"org": "o", "asset": "b", "key": "k"}'],
            max_entries=1,
        )
    with pytest.raises(ManifestError, match="longer than"):
        read_manifest(["x" * 9000], max_entries=10)


def test_the_command_prints_json_exits_non_zero_and_writes_metrics(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = make_driver(settings)
    _, entries = a_store(storage)
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text("".join(line + "\n" for line in manifest_lines(entries)))
    _command_env(monkeypatch, settings)
    metrics = tmp_path / "scrub.prom"
    args = ["scrub", "--manifest", str(manifest), "--json", "--verify", "all", "--metrics-file", str(metrics)]

    assert cli.main(args) == 0
    clean = json.loads(capsys.readouterr().out)
    assert clean["clean"] is True and clean["verified"] == 3

    storage.delete(entries[0].key)
    assert cli.main(args) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["missing"] == [
        {
            "kind": "missing",
            "organizationId": entries[0].org,
            "assetId": entries[0].asset,
            "key": entries[0].key,
        }
    ]
    text = metrics.read_text()
    assert "coffer_scrub_missing_objects 1.0" in text
    assert "coffer_scrub_corrupt_objects 0.0" in text

    assert cli.main(["scrub", "--manifest", str(manifest), "--verify", "lots"]) == 2
    # A metrics file that cannot be written is refused before the run; a push that fails
    # after it leaves the exit code the store's (1: the missing object), with a warning.
    capsys.readouterr()
    assert (
        cli.main(["scrub", "--manifest", str(manifest), "--metrics-file", str(tmp_path / "no/x.prom")]) == 2
    )
    assert "--metrics-file" in capsys.readouterr().err
    assert cli.main(["scrub", "--manifest", str(manifest), "--pushgateway", "127.0.0.1:1"]) == 1
    assert "the metrics were not exported" in capsys.readouterr().err
    assert cli.main(["scrub", "--manifest", str(tmp_path / "absent")]) == 2
    human = cli.main(["scrub", "--manifest", str(manifest), "--verify", "none"])
    assert human == 1
    assert "missing objects: 1" in capsys.readouterr().out


def test_the_command_reads_the_manifest_from_standard_input(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``coffer-metadata manifest | coffer-blob scrub --manifest -``: the pipe the docs show."""
    storage = make_driver(settings)
    _, entries = a_store(storage)
    entries = [dataclasses.replace(e, private=False, trashed=False) for e in entries]
    entries[0] = dataclasses.replace(entries[0], private=True)  # (stored public)
    lines = "".join(line + "\n" for line in manifest_lines(entries)).encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(lines)))
    monkeypatch.setenv("COFFER_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("COFFER_BLOB_DIR", str(settings.blob_dir))
    assert cli.main(["scrub", "--manifest", "-", "--json", "--flags", "fix"]) == 1  # a finding, fixed
    report = json.loads(capsys.readouterr().out)
    assert (report["assets"], report["fixedFlags"], len(report["flags"])) == (3, 1, 1)
    assert storage.stat(entries[0].key).private


def test_a_flag_the_store_refuses_to_set_is_reported_and_the_walk_goes_on(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, entries = a_store(storage)
    rows = [dataclasses.replace(e, private=True, trashed=False) for e in entries]
    refused = rows[1].key

    real = storage.set_private

    def set_private(key: str, private: bool) -> bool:
        if key == refused:
            raise StorageUnavailable("the store timed out")
        return real(key, private)

    monkeypatch.setattr(storage, "set_private", set_private)
    report = fix_flags(storage, rows)
    assert report.fixed_flags == 2 and len(report.of("flags")) == 3
    (failed,) = [f for f in report.of("flags") if f.key == refused]
    assert failed.detail.endswith("not set: the store timed out")
    assert [storage.stat(row.key).private for row in rows] == [True, False, True]


def test_flags_are_fixed_only_from_a_fresh_manifest_that_carries_them(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--flags fix`` sets objects to the rows as the manifest read them: from an hour-old one
    it would undo a file made private since; ``--flags`` on an older coffer-metadata's lines
    (no flags) would check nothing and say clean. Both are refused (exit 2), nothing changed."""
    storage = make_driver(settings)
    _, entries = a_store(storage)
    flagged = [dataclasses.replace(e, private=True, trashed=False) for e in entries]
    monkeypatch.setenv("COFFER_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("COFFER_BLOB_DIR", str(settings.blob_dir))

    def run(lines: list[str], flags: str) -> int:
        data = "".join(line + "\n" for line in lines).encode()
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
        return cli.main(["scrub", "--manifest", "-", "--flags", flags])

    stale = manifest_lines(flagged)
    end = json.loads(stale[-1])
    stale[-1] = json.dumps({**end, "at": (datetime.now(UTC) - HOUR).isoformat()})
    assert run(stale, "fix") == 2
    assert run(manifest_lines(entries), "check") == 2
    assert "carry no flags" in capsys.readouterr().err
    assert not any(storage.stat(e.key).private for e in entries)
    assert run(stale, "check") == 1  # (reporting is harmless, however old the manifest)
