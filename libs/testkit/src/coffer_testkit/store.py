"""What a stack's store holds, read behind its back: for tests that check nothing is left over."""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict
from typing import Any


def stored_objects(stack: Any, org_id: str) -> dict[str, dict[str, int]]:
    """What the storage holds for the organization: asset id -> {file name: size}, every file
    included (sidecars, temp files, unfinished multipart uploads)."""
    found: dict[str, dict[str, int]] = defaultdict(dict)
    env = stack.extra_env
    if env.get("COFFER_STORAGE") == "s3":
        import boto3

        s3 = boto3.client(
            "s3",
            endpoint_url=env["COFFER_S3_ENDPOINT_URL"],
            region_name=env["COFFER_S3_REGION"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        )
        bucket, prefix = env["COFFER_S3_BUCKET"], f"{org_id}/"
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                _, asset_id, name = obj["Key"].split("/", 2)
                found[asset_id][name] = obj["Size"]
        for upload in s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", []):
            _, asset_id, name = upload["Key"].split("/", 2)
            found[asset_id]["%multipart:" + name] = -1
        return dict(found)
    # The fs driver: buckets "%<id prefix>/" holding "<asset>.<hash of filename>" (the bytes;
    # reported under the filename its sidecar records), "<asset>%meta.<hash>", "<asset>%tmp.…";
    # and, from before buckets, a directory per asset.
    org_dir = stack.data_dir / "blobs" / "objects" / org_id
    if org_dir.exists():
        for directory in org_dir.iterdir():
            if not directory.name.startswith("%"):
                found[directory.name] = {f.name: f.stat().st_size for f in directory.iterdir()}
                continue
            try:
                files = list(directory.iterdir())
            except FileNotFoundError:
                continue  # its last file deleted meanwhile (a sweep), and the bucket with it
            for f in files:
                cut = min(i for i in (f.name.find("."), f.name.find("%")) if i > 0)
                asset_id, rest = f.name[:cut], f.name[cut:]
                # A delete running beside the walk (a purge the test watches) may take the file
                # or its sidecar between the listing and the read: what is gone is not held.
                with contextlib.suppress(FileNotFoundError):
                    if rest.startswith("."):
                        sidecar = directory / f"{asset_id}%meta{rest}"
                        try:
                            name = json.loads(sidecar.read_text())["name"]
                        except FileNotFoundError:
                            name = "no sidecar" + rest
                    else:
                        name = rest
                    found[asset_id][name] = f.stat().st_size
    return dict(found)
