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
A field whose library is missing, or with no decoder, stays bytes. A field
ending in ".gz" with no decoder of its own is gunzipped and decoded by the
rest of its name ("txt.gz" -> str), as webdataset does.

webdataset's habit: decode= also takes an image mode, the string given to
webdataset's .decode(): "pil" (PIL.Image), "rgb8" (numpy uint8 HxWx3),
"torchrgb" (torch float32 3xHxW in [0, 1]), "l8" (numpy uint8 HxW),
"torch" (as torchrgb). Every other built-in decoder (cls, json, npy, txt)
applies as with decode=True. to_tuple("jpg;png", "cls") makes the map=
that turns a sample into a tuple, as webdataset's .to_tuple().
"""

import gzip
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


def _rgb_array(data, mode):
    import numpy
    import PIL.Image
    with PIL.Image.open(io.BytesIO(data)) as img:
        return numpy.asarray(img.convert(mode), dtype=numpy.uint8)


def decode_rgb8(data):
    """numpy uint8 array HxWx3 (webdataset "rgb8")."""
    return _rgb_array(data, "RGB")


def decode_l8(data):
    """numpy uint8 array HxW, grey (webdataset "l8")."""
    return _rgb_array(data, "L")


def decode_torchrgb(data):
    """torch float32 tensor 3xHxW in [0, 1] (webdataset "torchrgb")."""
    import torch
    a = _rgb_array(data, "RGB")
    return torch.from_numpy(a.transpose(2, 0, 1).copy()).float().div_(255.0)


# Image modes of decode="..." (webdataset's imagespecs, the common ones).
IMAGE_MODES = {"pil": decode_image, "rgb8": decode_rgb8, "l8": decode_l8,
               "torchrgb": decode_torchrgb, "torch": decode_torchrgb}


def _importable(name):
    try:
        __import__(name)
    except ImportError:
        return False
    return True


def default_decoders(image="pil"):
    """A new dict {extension: callable(bytes) -> value} of the built-in
    decoders whose libraries are installed (see the module doc). Extend it
    and pass it as decode=: ShardcastDataset(..., decode={**default_decoders(),
    "seg.png": my_decoder})."""
    if image not in IMAGE_MODES:
        raise ValueError("image mode must be one of %s, not %r"
                         % (", ".join(sorted(IMAGE_MODES)), image))
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
            d[ext] = IMAGE_MODES[image]
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
            if fn is None and name.endswith(".gz"):
                inner = self._lookup(name[:-3])
                fn = _gunzip_then(inner) if inner is not None else gzip.decompress
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


def _gunzip_then(fn):
    def decode_gz(data):
        return fn(gzip.decompress(data))
    return decode_gz


def make_decoder(decode):
    """The sample -> sample callable for a decode= option: False/None (no
    decoding: None is returned), True (default_decoders()), an image mode
    ("pil", "rgb8", "torchrgb", ...: default_decoders(image=mode)), or a
    dict {extension: callable or None} used as given."""
    if decode is None or decode is False:
        return None
    if decode is True:
        return Decoder(default_decoders())
    if isinstance(decode, str):
        return Decoder(default_decoders(image=decode))
    if isinstance(decode, dict):
        return Decoder(decode)
    raise TypeError("decode must be True, False, an image mode (%s) or a dict "
                    "{extension: callable}, not %r" % (", ".join(sorted(IMAGE_MODES)), decode))


class to_tuple:  # noqa: N801 - named as webdataset's .to_tuple()
    """map= callable: a sample -> a tuple of its fields, as webdataset's
    .to_tuple(). Each argument names one field; "jpg;png" takes the first
    of those present; one string with spaces is several fields
    (to_tuple("jpg;png cls") == to_tuple("jpg;png", "cls")). "__key__",
    "__url__" and the other metadata names work too. A sample without any
    of a field's names raises ShardcastDecodeError naming them."""

    def __init__(self, *fields):
        if len(fields) == 1 and " " in fields[0]:
            fields = tuple(fields[0].split())
        if not fields or not all(isinstance(f, str) and f for f in fields):
            raise ValueError("to_tuple needs one or more field names")
        self.fields = tuple(tuple(f.split(";")) for f in fields)

    def _one(self, sample, names):
        for n in names:
            if n in sample:
                return sample[n]
        raise ShardcastDecodeError(
            "sample %r has no field %s (fields: %s)"
            % (sample.get("__key__"), " or ".join(map(repr, names)),
               ", ".join(sorted(k for k in sample if k[:2] != "__"))),
            key=sample.get("__key__"), field=";".join(names))

    def __call__(self, sample):
        return tuple(self._one(sample, names) for names in self.fields)

    def __repr__(self):
        return "to_tuple(%s)" % ", ".join(repr(";".join(f)) for f in self.fields)
