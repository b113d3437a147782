"""What the strategy-search checkers share: reading `partita plan
--strategy auto --search-report` and an account of which device groups span
nodes written apart from the tool's."""


def read_report(path):
    """The report's rows as dicts, numbers parsed; `traffic` as (axes,
    bucketed, calls, wire bytes) tuples and `stages` as dicts of F, B, W,
    send, update (seconds) and memory (bytes)."""
    rows = []
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            row = dict(zip(header, line.rstrip("\n").split("\t")))
            for key in ("rank", "microbatches", "calls", "collectives",
                        "memory_bytes", "crosses_nodes"):
                row[key] = int(row[key])
            for key in ("seconds", "compute_seconds", "comm_seconds",
                        "hidden_seconds", "bubble_seconds", "flops",
                        "kernel_flops", "kernel_bytes", "wire_bytes"):
                row[key] = float(row[key])
            row["traffic"] = [
                (t.split("/")[0].split("+"), t.split("/")[1] == "bucketed",
                 int(t.split("/")[2]), float(t.split("/")[3]))
                for t in row["traffic"].split(";") if t]
            row["stages"] = [
                dict(zip(("F", "B", "W", "send", "update"),
                         map(float, s.split("/")[:5])),
                     memory=int(s.split("/")[5]))
                for s in row["stages"].split(";") if s]
            rows.append(row)
    return rows


def spans_nodes(mesh, group_axes, per_node):
    """Whether a group over group_axes of the row-major mesh ("dp=2,tp=4")
    holds devices of two nodes of per_node consecutive devices."""
    axes = [(a.split("=")[0], int(a.split("=")[1])) for a in mesh.split(",")]
    devices = 1
    for _, size in axes:
        devices *= size
    if not per_node or per_node >= devices:
        return False
    strides, stride = {}, 1
    for name, size in reversed(axes):
        strides[name] = stride
        stride *= size
    for device in range(devices):
        # The device's group: every coordinate along group_axes, its own
        # along the others.
        members = [0]
        for name, size in axes:
            coord = (device // strides[name]) % size
            choices = range(size) if name in group_axes else [coord]
            members = [m + c * strides[name] for m in members for c in choices]
        if len({m // per_node for m in members}) > 1:
            return True
    return False


def price_traffic(row, call, link, node_link, per_node):
    """The cost model applied to a row's traffic, written apart from the
    tool: (comm seconds, the bucketed share of them, whether some group
    spans nodes), each group at `node_link` bytes/s when it spans nodes of
    `per_node` devices, else at `link`, plus `call` seconds a call."""
    comm = bucketed = 0
    crosses = False
    for axes, is_bucketed, calls, wire in row["traffic"]:
        spans = spans_nodes(row["mesh"], axes, per_node)
        crosses |= spans
        seconds = calls * call + wire / (node_link if spans else link)
        comm += seconds
        bucketed += seconds if is_bucketed else 0
    return comm, bucketed, crosses
