"""edit_manifest.py MANIFEST OLD NEW|--drop-line [--reseal]: replaces the
first OLD in a checkpoint manifest with NEW (a "\\n" in NEW is a line
break), or drops the line holding it; with --reseal, also rewrites the last
line, the CRC-32 of the lines before it, so the edit passes the checksum
and reaches the loader's field checks."""
import sys
import zlib

path, old, new = sys.argv[1:4]
text = open(path).read()
at = text.find(old)
if at < 0:
    sys.exit(f"'{old}' is not in {path}")
if new == "--drop-line":
    start = text.rfind("\n", 0, at) + 1
    text = text[:start] + text[text.index("\n", at) + 1:]
else:
    text = text[:at] + new.replace("\\n", "\n") + text[at + len(old):]
if "--reseal" in sys.argv[4:]:
    body = text[: text.rindex("end ")]
    text = body + "end %08x\n" % zlib.crc32(body.encode())
open(path, "w").write(text)
