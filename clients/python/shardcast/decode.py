"""Decoders for common WebDataset fields.

A decoder turns a field's bytes into a Python value. The field (the
extension, e.g. "cls", "jpg", "seg.png") picks the decoder: first by the
whole extension, then by its last dot-separated part, so "seg.png" decodes
as "png" unless a decoder for "seg.png" itself is given.

Built-in decoders (default_decoders()):
  cls, cls2, index, inx, id   int (ASCII decimal, surrounding spaces allowed)
  txt, text, transcript       str (UTF-8)
  json, jsn                   the parsed JSON value
  npy                         numpy.ndarray (numpy.load, allow_pickle=False),
                              only when numpy is installed
  jpg, jpeg, png, ppm, pgm, pbm, pnm, bmp, gif, tif, tiff, webp
                              a loaded PIL.Image.Image, only when Pillow is
                              installed
A field whose library is missing, or with no decoder, stays bytes.
"""

import io
import json

from .errors import ShardcastDecodeError

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "ppm", "pgm", "pbm", "pnm", "bmp", "gif",
                    "tif", "tiff", "webp")


def decode_int(data):
    return int(data.decode("ascii").strip())


def decode_text(data):
    return data.decode("utf-8")


def decode_json(data):
    return json.loads(data.decode("utf-8"))


def decode_npy(data):
    import numpy
    return numpy.load(io.BytesIO(data), allow_pickle=False)


def decode_image(data):
    import PIL.Image
    img = PIL.Image.open(io.BytesIO(data))
    img.load()  # decode now, so errors surface here and the buffer can go
    return img


def _importable(name):
    try:
        __import__(name)
    except ImportError:
        return False
    return True


def default_decoders():
    """A new dict {extension: callable(bytes) -> value} of the built-in
    decoders whose libraries are installed (see the module doc). Extend it
    and pass it as decode=: ShardcastDataset(..., decode={**default_decoders(),
    "seg.png": my_decoder})."""
    d = {}
    for ext in ("cls", "cls2", "index", "inx", "id"):
        d[ext] = decode_int
    for ext in ("txt", "text", "transcript"):
        d[ext] = decode_text
    for ext in ("json", "jsn"):
        d[ext] = decode_json
    if _importable("numpy"):
        d["npy"] = decode_npy
    if _importable("PIL.Image"):
        for ext in IMAGE_EXTENSIONS:
            d[ext] = decode_image
    return d


class Decoder:
    """Applies a table of decoders to samples (callable: sample -> sample).

    decoders maps extensions to callables taking bytes; a value of None
    leaves that extension as bytes. Metadata entries ("__key__", ...) are
    never touched. A decoder that raises becomes a ShardcastDecodeError that
    names the sample key and the field.
    """

    def __init__(self, decoders):
        if not isinstance(decoders, dict):
            raise TypeError("decoders must be a dict {extension: callable}")
        for ext, fn in decoders.items():
            if not isinstance(ext, str) or not ext:
                raise ValueError("decoder extensions must be non-empty strings: %r" % (ext,))
            if fn is not None and not callable(fn):
                raise TypeError("decoder for %r is not callable" % ext)
        self.decoders = dict(decoders)
        self._cache = {}  # field name -> decoder (or None), by the lookup rule

    def _lookup(self, name):
        try:
            return self._cache[name]
        except KeyError:
            pass
        fn = self.decoders.get(name)
        if fn is None and name not in self.decoders and "." in name:
            fn = self.decoders.get(name.rpartition(".")[2])
        self._cache[name] = fn
        return fn

    def __call__(self, sample):
        for name, value in sample.items():
            if name[:2] == "__" or not isinstance(value, (bytes, bytearray)):
                continue
            fn = self._lookup(name)
            if fn is None:
                continue
            try:
                sample[name] = fn(value)
            except Exception as e:  # noqa: BLE001 - any decoder failure is reported alike
                raise ShardcastDecodeError(
                    "cannot decode field %r of sample %r: %s: %s"
                    % (name, sample.get("__key__"), type(e).__name__, e),
                    key=sample.get("__key__"), field=name) from e
        return sample


def make_decoder(decode):
    """The sample -> sample callable for a decode= option: False/None (no
    decoding: None is returned), True (default_decoders()), or a dict
    {extension: callable or None} used as given."""
    if decode is None or decode is False:
        return None
    if decode is True:
        return Decoder(default_decoders())
    if isinstance(decode, dict):
        return Decoder(decode)
    raise TypeError("decode must be True, False or a dict {extension: callable}, not %r"
                    % (decode,))
