"""Image transforms on the CDN host (CONTRACT §10).

The engine is libvips through ``pyvips``, with libvips itself from the ``pyvips-binary``
wheel (locked in ``uv.lock`` with hashes) rather than Debian's ``libvips42``:

- one install path everywhere: ``uv sync`` (``make setup``, hence ``make run`` and
  ``make test``, the Dockerfile's ``uv sync --frozen`` and CI) installs it; nothing to add
  to apt lines, and the image build needs no extra layer;
- reproducible: the same libvips (8.18.7) on every machine, pinned by hash; Debian 12
  ships 8.14 with whatever codecs its libheif build enables;
- formats: the wheel bundles libwebp, libheif with AV1 (AVIF load and save), libjpeg-turbo,
  libspng, libtiff and cgif, all checked by ``tests/test_transforms_engine.py``;
- weight: ~18 MiB unpacked (``pyvips_binary.libs``) against 26 Debian packages pulled
  in by ``apt-get install --no-install-recommends libvips42``.

The wheel also carries ``svgload``: this package never lets libvips pick a loader by
itself; it sniffs the source's magic bytes and calls only the loaders for the contract's
source formats (JPEG, PNG, WebP, AVIF, GIF, TIFF), so SVG is never rasterised.
"""
