"""edit_manifest.py MANIFEST OLD NEW [--reseal]: replaces the first OLD in a
checkpoint manifest with NEW; with --reseal, also rewrites its last line,
the CRC-32 of the lines before it, so the edit passes the checksum and
reaches the loader's field checks."""
import sys
import zlib

path, old, new = sys.argv[1:4]
text = open(path).read()
if old not in text:
    sys.exit(f"'{old}' is not in {path}")
text = text.replace(old, new, 1)
if "--reseal" in sys.argv[4:]:
    body = text[: text.rindex("end ")]
    text = body + "end %08x\n" % zlib.crc32(body.encode())
open(path, "w").write(text)
