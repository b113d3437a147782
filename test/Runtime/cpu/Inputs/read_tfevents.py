"""Reads TensorBoard event files back, checking their framing, and compares
their scalars with partita train's JSONL metrics.

  read_tfevents.py EVENTS_DIR METRICS.jsonl

Each record is a little-endian uint64 length, the masked CRC-32C of those 8
bytes, the data (a tensorflow.Event protobuf) and the masked CRC-32C of the
data; decoded here from the protobuf wire format by hand (field numbers of
tensorflow/core/util/event.proto and summary.proto). Prints what it read;
exits 1 on a bad CRC or a scalar that differs from the JSONL value (the
event holds float32).
"""
import glob
import json
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fields(buf):
    """(field number, wire type, value) of a protobuf message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        elif wire == 2:
            n, i = varint(buf, i)
            value, i = buf[i:i + n], i + n
        else:
            sys.exit("read_tfevents: wire type %d" % wire)
        yield field, wire, value


def varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, i


events_dir, metrics = sys.argv[1:3]
files = glob.glob(events_dir + "/events.out.tfevents.*")
if len(files) != 1:
    sys.exit("read_tfevents: expected one event file, found %d" % len(files))
data = open(files[0], "rb").read()
i, events = 0, []
while i < len(data):
    header = data[i:i + 8]
    (length,) = struct.unpack("<Q", header)
    (length_crc,) = struct.unpack("<I", data[i + 8:i + 12])
    body = data[i + 12:i + 12 + length]
    (body_crc,) = struct.unpack("<I", data[i + 12 + length:i + 16 + length])
    if masked(header) != length_crc or masked(body) != body_crc:
        sys.exit("read_tfevents: bad CRC in the record at byte %d" % i)
    i += 16 + length
    event = {"scalars": {}}
    for field, _, value in fields(body):
        if field == 2:
            event["step"] = value
        elif field == 3:
            event["file_version"] = value.decode()
        elif field == 5:
            for vf, _, v in fields(value):
                if vf != 1:
                    continue
                tag, simple = None, None
                for f, _, x in fields(v):
                    if f == 1:
                        tag = x.decode()
                    elif f == 2:
                        (simple,) = struct.unpack("<f", x)
                event["scalars"][tag] = simple
    events.append(event)
print("read_tfevents: %d records, file_version %s" % (len(events), events[0].get("file_version")))
jsonl = {}
for line in open(metrics):
    r = json.loads(line)
    key = "val_loss" if r["type"] == "eval" else "loss"
    jsonl.setdefault(r["step"], {})[key] = r["val_loss" if r["type"] == "eval" else "loss"]
    if r["type"] == "step":
        jsonl[r["step"]]["lr"] = r["lr"]
tags, compared = set(), 0
for e in events[1:]:
    tags.update(e["scalars"])
    for tag in ("loss", "lr", "val_loss"):
        if tag in e["scalars"]:
            want = jsonl[e["step"]][tag]
            got = e["scalars"][tag]
            if got != struct.unpack("<f", struct.pack("<f", want))[0]:
                sys.exit("read_tfevents: step %d %s %r, JSONL %r" % (e["step"], tag, got, want))
            compared += 1
print("read_tfevents: tags " + " ".join(sorted(tags)))
print("read_tfevents: %d scalars equal the JSONL's (as float32)" % compared)
