#!/usr/bin/env python3
"""Rebuilds data/pride_and_prejudice.txt from Debian's r-cran-janeaustenr package.

The package stores each novel as an R character vector (one element per line) in R's
lazy-load database (data/Rdata.rdx + data/Rdata.rdb). R is not needed: this script reads the
database with a small reader of R's XDR serialisation format that understands just what that
database holds (lists, character vectors, attributes).

    apt-get download r-cran-janeaustenr
    dpkg-deb -x r-cran-janeaustenr_*.deb pkg
    python3 data/extract_janeaustenr.py pkg/usr/lib/R/site-library/janeaustenr/data \
        prideprejudice > data/pride_and_prejudice.txt
"""
import bz2
import gzip
import lzma
import struct
import sys
import zlib


class _Reader:
    """Reads one R object serialised in XDR format (R's serialize(), versions 2 and 3)."""

    # Special values that carry no payload (NULL, the global/base/empty environments, ...).
    _NO_PAYLOAD = {254, 253, 252, 251, 250, 242, 241}

    def __init__(self, data):
        self.data, self.pos, self.refs = data, 0, []

    def _take(self, n):
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def _int(self):
        return struct.unpack(">i", self._take(4))[0]

    def _length(self):
        n = self._int()
        if n == -1:  # long vector: two more words
            hi, lo = self._int(), self._int()
            n = (hi << 32) + lo
        return n

    def read(self):
        if self._take(2) != b"X\n":
            raise ValueError("not an XDR serialisation")
        version = self._int()
        self._int()  # writer's R version
        self._int()  # minimal reader version
        if version == 3:
            self._take(self._int())  # native encoding name
        return self._item()

    def _item(self):
        flags = self._int()
        kind = flags & 0xFF
        has_attr, has_tag = flags & (1 << 9), flags & (1 << 10)
        if kind in self._NO_PAYLOAD:
            return None
        if kind == 255:  # back-reference to a symbol or environment read earlier
            return self.refs[(flags >> 8) - 1]
        if kind == 1:  # symbol: its name
            sym = ("symbol", self._item())
            self.refs.append(sym)
            return sym
        if kind in (2, 6):  # pairlist / call: attributes, tag, head, tail
            attr = self._item() if has_attr else None
            tag = self._item() if has_tag else None
            head, tail = self._item(), self._item()
            return ("pairlist", tag, head, tail, attr)
        if kind == 9:  # one string
            n = self._int()
            return None if n == -1 else self._take(n).decode("utf-8")
        if kind in (10, 13):  # logical / integer vector
            value = [self._int() for _ in range(self._length())]
        elif kind == 14:  # double vector
            value = [struct.unpack(">d", self._take(8))[0] for _ in range(self._length())]
        elif kind in (16, 19):  # character vector / list
            value = [self._item() for _ in range(self._length())]
        else:
            raise ValueError(f"R object type {kind} is not supported by this reader")
        if has_attr:
            return ("with_attributes", value, self._item())
        return value


def _unserialize(data):
    return _Reader(data).read()


def _pairlist_to_dict(node):
    out = {}
    while node is not None:
        _, tag, head, node, _ = node
        out[tag[1]] = head
    return out


def _named(value):
    """An R object with a names attribute -> dict name: element."""
    _, elements, attributes = value
    return dict(zip(_pairlist_to_dict(attributes)["names"], elements))


def load(rdx_path, rdb_path):
    """All objects of a lazy-load database, by name."""
    with open(rdx_path, "rb") as f:
        raw = f.read()
    index = _named(_unserialize(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else zlib.decompress(raw)))
    names, positions = index["variables"][2], index["variables"][1]
    names = _pairlist_to_dict(names)["names"]
    with open(rdb_path, "rb") as f:
        db = f.read()
    objects = {}
    for name, (offset, length) in zip(names, positions):
        chunk = db[int(offset):int(offset) + int(length)]
        size, body = struct.unpack(">i", chunk[:4])[0], chunk[4:]
        try:
            data = zlib.decompress(body)
        except zlib.error:  # bzip2/xz/none, tagged by one byte
            decompress = {b"Z": bz2.decompress, b"X": lzma.decompress, b"0": lambda b: b}
            data = decompress[body[:1]](body[1:])
        if len(data) != size:
            raise ValueError(f"{name}: corrupt entry")
        objects[name] = _unserialize(data)
    return objects


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: extract_janeaustenr.py JANEAUSTENR_DATA_DIR OBJECT_NAME")
    folder, name = sys.argv[1], sys.argv[2]
    lines = load(f"{folder}/Rdata.rdx", f"{folder}/Rdata.rdb")[name]
    text = "\n".join(line or "" for line in lines) + "\n"
    sys.stdout.write(text.replace("\r\n", "\n"))


if __name__ == "__main__":
    main()
