"""dcpp.plan: the same plans as the CLI, inputs, estimators (a Python cost), errors, the plan
object (JSON, SVG, validation, routes)."""
import json
import re
import subprocess
import threading
import xml.etree.ElementTree

import numpy as np
import pytest

import dcpp
from conftest import load, workload_params


def strip_timing(text):
    """The plan JSON with its one timing field zeroed (the planning time differs run to run)."""
    out, n = re.subn(r'"plan_seconds":[^,}]*', '"plan_seconds":0', text)
    assert n == 1
    return out


def cli_json(cli, args, stdin=None):
    r = subprocess.run([cli, *args, "--json", "-"], input=stdin, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def groups_of(plan):
    return [[(g.first_rank, g.cp, g.samples.tolist()) for g in mb.groups] for mb in plan]


# ---- the CLI's plans, bit for bit ------------------------------------------------------------


@pytest.mark.parametrize("path", workload_params())
@pytest.mark.parametrize("policy", ["balanced", "megatron_greedy", "uniform_cp"])
@pytest.mark.parametrize("estimator", ["llama3-8b@h100", "megatron", "length2"])
def test_plans_equal_the_cli_on_the_shared_workloads(cli, path, policy, estimator):
    w = load(path)
    text = cli_json(cli, [w["path"], "--policy", policy, "--estimator", estimator])
    p = dcpp.plan(
        w["lengths"],
        w["world_size"],
        w["max_tokens_per_rank"],
        policy=policy,
        estimator=estimator,
        min_cp=w["min_cp"],
        microbatch_multiple=w["microbatch_multiple"],
    )
    assert strip_timing(p.to_json()) == strip_timing(text)
    p.validate()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_plans_equal_the_cli_at_awkward_sizes_and_options(cli, seed):
    rng = np.random.default_rng(seed)
    world = int(rng.choice([6, 12, 24, 40]))
    lengths = np.maximum(1, rng.lognormal(7, 1.4, int(rng.integers(37, 301)))).astype(np.int64)
    budget = int(max(lengths.max() // world + 16, 3000))  # padding: +8 tokens per rank at most
    args = ["-", "--world-size", str(world), "--max-tokens-per-rank", str(budget),
            "--topology", "contiguous", "--padding-unit", "4", "--gpus-per-node", "4",
            "--inter-node-bandwidth", "25", "--microbatch-overhead", "0.002",
            "--extra-microbatches", "2"]
    text = cli_json(cli, args, stdin="\n".join(map(str, lengths.tolist())) + "\n")
    p = dcpp.plan(lengths, world, budget, topology="contiguous", padding_unit=4,
                  gpus_per_node=4, inter_node_bandwidth=25, microbatch_overhead=0.002,
                  extra_microbatches=2)
    assert strip_timing(p.to_json()) == strip_timing(text)


def test_calibrated_file_plans_like_the_cli(cli, tmp_path):
    rows = ["length,cp,seconds"]
    for length in (1000, 2000, 4000, 8000, 16000, 32000):
        for cp in (1, 2, 4, 8, 16):
            t = 1e-6 * length / cp + 2e-10 * length * length / cp + (cp > 1) * 1e-4 * (cp - 1)
            rows.append(f"{length},{cp},{t:.9g}")
    rows.append("microbatch,0.001")
    csv = tmp_path / "cal.csv"
    csv.write_text("\n".join(rows) + "\n")
    lengths = [300, 31000, 9000, 1200, 15000, 700, 4000] * 5
    text = cli_json(cli, ["-", "--world-size", "16", "--max-tokens-per-rank", "8192",
                          "--estimator", f"calibrated:{csv}"],
                    stdin="\n".join(map(str, lengths)) + "\n")
    by_name = dcpp.plan(lengths, 16, 8192, estimator=f"calibrated:{csv}")
    assert strip_timing(by_name.to_json()) == strip_timing(text)
    fitted = dcpp.fit_calibration(csv=csv)
    assert fitted.name == f"calibrated:{csv}"
    assert strip_timing(dcpp.plan(lengths, 16, 8192, estimator=fitted).to_json()) == strip_timing(text)
    assert fitted.microbatch_overhead == pytest.approx(0.001)
    assert fitted.report["rows"] == 31
    assert fitted.report["form"] == "hinge"  # a latency-only ring: the exposure form has no such shape


# ---- inputs --------------------------------------------------------------------------------


def test_lists_and_integer_arrays_give_the_same_plan():
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 20000, 211)
    base = dcpp.plan(lengths.astype(np.int64), 24, 8192, topology="contiguous")
    for form in (lengths.tolist(), lengths.astype(np.int32), lengths.astype(np.uint16 if lengths.max() < 65536 else np.int64),
                 tuple(lengths.tolist()), lengths.astype(np.int64)[::-1][::-1]):
        assert dcpp.plan(form, 24, 8192, topology="contiguous") == base


def test_int64_arrays_are_not_copied():
    a = np.arange(1, 100, dtype=np.int64)
    assert dcpp._lengths(a) is a
    assert dcpp._lengths(a.astype(np.int32)) is not a


@pytest.mark.parametrize(
    "lengths, message",
    [
        ([100, -5], "sample 1: length = -5"),
        ([100, 0, 7], "sample 1"),
        ([100.0, 5.5], "expected integers, got float64"),
        ([[1, 2]], "1-D"),
        ([True, False], "sample 0 is bool True: expected integers"),
        ([100, True, 5], "sample 1 is bool True: expected integers (a token count, not a flag)"),
        ((7, 8, np.False_), "sample 2 is bool False: expected integers"),
        (np.array([True, False]), "expected integers, got bool"),
        ([2**70], "expected integers"),
        ([], "empty"),
        ([10, 10**9], "sample 1"),
    ],
)
def test_bad_lengths_raise_valueerror_naming_the_sample(lengths, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        dcpp.plan(lengths, 8, 4096)


def test_lengths_take_any_iterable_and_refuse_a_single_value_by_type():
    lengths = [100, 5000, 20000, 700, 9000]
    base = strip_timing(dcpp.plan(lengths, 8, 4096).to_json())
    # a generator, a range, a dict's values: read once, in order (a generator was 'got shape ()')
    for same in ((n for n in lengths), tuple(lengths), {i: n for i, n in enumerate(lengths)}.values()):
        assert strip_timing(dcpp.plan(same, 8, 4096).to_json()) == base
    assert dcpp.plan(range(1, 100), 8, 4096).metrics["efficiency"] > 0
    for bad, shown in (("12345", "str '12345'"), (b"12", "bytes b'12'"), (4096, "int 4096"),
                       (None, "NoneType None"), ("9" * 100, "str '" + "9" * 39 + "... (102 characters)")):
        with pytest.raises(TypeError, match=re.escape(
                f"lengths: expected a sequence, an array or an iterable of integers, got {shown}")):
            dcpp.plan(bad, 8, 4096)
    # a set would plan its lengths in hash order, each once: sample ids are positions
    for unordered in ({100, 5000, 100}, frozenset(lengths)):
        with pytest.raises(TypeError, match=re.escape("has no order and holds each length once")):
            dcpp.plan(unordered, 8, 4096)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"policy": "fastest"}, "policy = 'fastest'"),
        ({"estimator": "gpt9"}, "estimator 'gpt9' is unknown"),
        ({"estimator": 3}, "estimator: expected a name"),
        ({"topology": "ring"}, "topology = 'ring'"),
        ({"min_cp": 3}, "min_cp = 3"),
        ({"max_tokens_per_rank": 1}, "max_tokens_per_rank = 1"),
        ({"microbatch_overhead": -1.0}, "microbatch_overhead = -1"),
        ({"microbatch_overhead": float("nan")}, "microbatch_overhead = nan"),
        ({"extra_microbatches": -2}, "extra_microbatches = -2"),
        ({"gpus_per_node": 0}, "gpus_per_node = 0"),
        ({"inter_node_bandwidth": 0.0}, "inter_node_bandwidth = 0 GB/s must be above 0"),
        ({"intra_node_bandwidth": float("nan")}, "intra_node_bandwidth = nan GB/s must be above 0"),
        # where the rates do not apply, that is the message, whatever their value
        ({"estimator": "length2", "inter_node_bandwidth": 40.0}, "estimator length2 (length^2/cp) has none"),
        ({"estimator": "length2", "gpus_per_node": 4}, "estimator length2 (length^2/cp) has none"),
        ({"estimator": "megatron", "inter_node_bandwidth": -1.0}, "inter_node_bandwidth = -1 GB/s must be above 0"),
        ({"topology": "Megatron"}, "topology = 'Megatron'; use 'aligned', 'contiguous' or 'megatron'"),
        # past the C++ integer: named here, not nanobind's "incompatible function arguments"
        ({"world_size": 2**40}, "world_size = 1099511627776 must be an integer from -2147483648 "
                                "to 2147483647"),
        ({"max_tokens_per_rank": 2**63}, "max_tokens_per_rank = 9223372036854775808 must be"),
        ({"microbatch_multiple": -2**31 - 1}, "microbatch_multiple = -2147483649 must be"),
        ({"gpus_per_node": np.uint64(2**63)}, "gpus_per_node = 9223372036854775808 must be"),
        # within it: dcpp's own limits
        ({"world_size": 2**31 - 1}, "world_size = 2147483647 exceeds the limit 16777216"),
        ({"microbatch_multiple": 5000}, "microbatch_multiple = 5000 exceeds the limit 1024"),
        ({"world_size": "8"}, "world_size: expected an integer, got str '8'"),
        ({"padding_unit": 2.0}, "padding_unit: expected an integer, got float 2.0"),
        ({"world_size": True}, "world_size: expected an integer, got bool True"),
        ({"world_size": list(range(100))},
         "world_size: expected an integer, got list " + repr(list(range(100)))[:40] + "... (390 characters)"),
        # finite, past what the planner can sum: inf bytes/s, a step time of inf
        ({"inter_node_bandwidth": 1e300},
         "inter_node_bandwidth = 1e+300 GB/s must be above 0 and at most 1.7976931348623156e+299"),
        ({"microbatch_overhead": 1e308}, "microbatch_overhead = 1e+308 exceeds the limit "),
        # a number option's type (nanobind's "incompatible function arguments" before)
        ({"microbatch_overhead": "0.01"}, "microbatch_overhead: expected a number, got str '0.01'"),
        ({"microbatch_overhead": True}, "microbatch_overhead: expected a number, got bool True"),
        ({"intra_node_bandwidth": "300"}, "intra_node_bandwidth: expected a number, got str '300'"),
        ({"inter_node_bandwidth": 10**400},
         "inter_node_bandwidth = an integer of 401 digits is past the largest double"),
    ],
)
def test_bad_options_raise_with_the_option_and_value(kwargs, message):
    args = {"world_size": 8, "max_tokens_per_rank": 4096, **kwargs}
    exc = TypeError if ": expected " in message else ValueError  # a wrong type, else a value
    with pytest.raises(exc, match=re.escape(message)):
        dcpp.plan([100, 5000, 20000], **args)


@pytest.mark.parametrize(
    "gpus_per_node, exc, message",
    [
        (2**40, ValueError, "gpus_per_node = 1099511627776 must be an integer from -2147483648 to 2147483647"),
        (2**31, ValueError, "gpus_per_node = 2147483648 must be an integer from"),
        ("8", TypeError, "gpus_per_node: expected an integer, got str '8'"),
        (8.0, TypeError, "gpus_per_node: expected an integer, got float 8.0"),
        (True, TypeError, "gpus_per_node: expected an integer, got bool True"),
        (0, ValueError, "calibration: gpus_per_node = 0 must be >= 1"),
        (-3, ValueError, "calibration: gpus_per_node = -3 must be >= 1"),
    ],
)
def test_fit_calibration_refuses_a_bad_gpus_per_node_by_name(tmp_path, gpus_per_node, exc, message):
    rows = [(n, cp, 1e-6 * n / cp + 2e-5 * (cp - 1)) for n in (500, 2000, 8000, 32000) for cp in (1, 2, 4, 8, 16)]
    csv = tmp_path / "cal.csv"
    csv.write_text("length,cp,seconds\n" + "".join(f"{n},{cp},{t:.9g}\n" for n, cp, t in rows))
    for source in ({"rows": rows}, {"csv": str(csv)}):
        with pytest.raises(exc, match=re.escape(message)):
            dcpp.fit_calibration(**source, gpus_per_node=gpus_per_node)
    # the same rows fit at a legal value, from both sources
    assert dcpp.fit_calibration(rows=rows, gpus_per_node=4).report["rows"] == len(rows)
    assert dcpp.fit_calibration(csv=str(csv), gpus_per_node=4).report["rows"] == len(rows)


def test_fit_calibration_reads_a_csv_with_a_byte_order_mark_and_refuses_a_binary_one(tmp_path):
    rows = [(n, cp, 1e-6 * n / cp + 2e-5 * (cp - 1)) for n in (500, 2000, 8000, 32000) for cp in (1, 2, 4)]
    text = "".join(f"{n},{cp},{t:.9g}\n" for n, cp, t in rows)
    plain, marked, binary = tmp_path / "plain.csv", tmp_path / "marked.csv", tmp_path / "binary.csv"
    plain.write_text(text)
    marked.write_bytes(b"\xef\xbb\xbf" + text.encode())  # no header: the first row was skipped
    binary.write_bytes(text.encode() + b"\0\1\2")
    assert dcpp.fit_calibration(csv=str(marked)).report == dcpp.fit_calibration(csv=str(plain)).report
    assert dcpp.fit_calibration(csv=str(marked)).report["rows"] == len(rows)
    with pytest.raises(ValueError, match=re.escape(f"holds a NUL byte (byte {len(text)}): it is not text")):
        dcpp.fit_calibration(csv=str(binary))


CALIBRATION_ROWS = [(n, cp, 1e-6 * n / cp + 2e-5 * (cp - 1)) for n in (500, 2000, 8000, 32000) for cp in (1, 2, 4)]


@pytest.mark.parametrize(
    "row, exc, message",
    [
        # each was RuntimeError 'std::bad_cast' from the extension
        ((1000, 1, "0.1"), TypeError, "rows[12] seconds: expected a number, got str '0.1'"),
        ((1000.5, 1, 0.1), TypeError, "rows[12] length: expected an integer, got float 1000.5"),
        (("microbatch", "x"), TypeError, "rows[12] seconds: expected a number, got str 'x'"),
        ((2**70, 1, 0.1), ValueError, "rows[12] length = 1180591620717411303424 must be an integer from"),
        ((True, 1, 0.1), TypeError, "rows[12] length: expected an integer, got bool True"),
        ((1000, 1, None), TypeError, "rows[12] seconds: expected a number, got NoneType None"),
        (None, TypeError, "rows[12]: expected (length, cp, seconds) or ('microbatch', seconds), got None"),
        ("abc", TypeError, "rows[12]: expected (length, cp, seconds) or ('microbatch', seconds), got 'abc'"),
        # the shape and the values, as before
        ((1000, 1), ValueError, "rows[12]: expected (length, cp, seconds) or ('microbatch', seconds), got (1000, 1)"),
        ((1000, 1, 0.1, 4), ValueError, "got (1000, 1, 0.1, 4)"),
        # a long row is cut as every repr in a message is (it was shown whole)
        ([0.5] * 1000, ValueError, "got " + repr([0.5] * 1000)[:40] + "... (5000 characters)"),
        ((1000, 1, "9" * 100), TypeError, "seconds: expected a number, got str '" + "9" * 39 + "... (102"),
        ((1000, 2**40, 0.1), ValueError, "rows[12]: cp = 1099511627776 must be in [1, 2147483647]"),
        # the values, named by the row as counted here (the fit counted from 1: 'calibration row 13')
        ((1000, 1, float("nan")), ValueError, "rows[12] seconds = nan must be a finite time > 0"),
        ((1000, 1, float("inf")), ValueError, "rows[12] seconds = inf must be a finite time > 0"),
        ((1000, 1, 0), ValueError, "rows[12] seconds = 0.0 must be a finite time > 0"),
        (("microbatch", -0.5), ValueError, "rows[12] seconds = -0.5 must be a finite time > 0"),
        ((0, 1, 0.1), ValueError, "rows[12] length = 0 must be positive"),
        ((-7, 2, 0.1), ValueError, "rows[12] length = -7 must be positive"),
    ],
)
def test_fit_calibration_names_a_bad_row_and_field(row, exc, message):
    with pytest.raises(exc, match=re.escape(message)):
        dcpp.fit_calibration(rows=CALIBRATION_ROWS + [row])


def test_calibration_rows_take_numpy_numbers_and_the_extension_names_a_bad_row():
    plain = dcpp.fit_calibration(rows=CALIBRATION_ROWS)
    as_numpy = dcpp.fit_calibration(rows=[(np.int64(n), np.int32(cp), np.float64(t)) for n, cp, t in CALIBRATION_ROWS])
    assert as_numpy.report == plain.report
    assert dcpp.fit_calibration(rows=np.array([(n, cp, 2) for n, cp, _ in CALIBRATION_ROWS])).report["rows"] == 12
    # the extension's own entry point, called directly, names the row too
    with pytest.raises(TypeError, match=re.escape("rows[12]: expected (length, cp, seconds) with integer length")):
        dcpp.Calibration.from_rows(CALIBRATION_ROWS + [(1000, 1, "0.1")])


def test_number_options_take_any_real_number():
    lengths = [100, 5000, 20000, 700, 9000]
    base = dcpp.plan(lengths, 8, 4096, microbatch_overhead=0.25, inter_node_bandwidth=20.0)
    for overhead, rate in ((np.float32(0.25), 20), (np.float64(0.25), np.int64(20))):
        other = dcpp.plan(lengths, 8, 4096, microbatch_overhead=overhead, inter_node_bandwidth=rate)
        assert strip_timing(other.to_json()) == strip_timing(base.to_json())


# ---- a cost written in Python -------------------------------------------------------------


def test_a_python_cost_plans_as_the_same_cost_in_cpp():
    rng = np.random.default_rng(11)
    lengths = rng.integers(50, 60000, 517)
    cpp = dcpp.plan(lengths, 32, 16384, estimator="length2")
    py = dcpp.plan(lengths, 32, 16384, estimator=lambda length, cp: length * length / cp)
    assert groups_of(py) == groups_of(cpp)
    assert py.metrics["estimated_step_time"] == cpp.metrics["estimated_step_time"]
    assert py.estimator == "python:<lambda>"

    # a calibration's own cost, through Python, plans as the calibration (no micro-batch rows:
    # both take the default overhead)
    rows = [(n, cp, 1e-6 * n / cp + 1e-10 * n * n / cp + 2e-5 * (cp - 1))
            for n in (500, 1000, 2000, 4000, 8000, 16000, 32000, 64000) for cp in (1, 2, 4, 8, 16, 32)]
    cal = dcpp.fit_calibration(rows=rows)
    a = dcpp.plan(lengths, 32, 16384, estimator=cal)
    b = dcpp.plan(lengths, 32, 16384, estimator=cal.cost)
    assert groups_of(a) == groups_of(b)


def test_the_cost_callable_is_called_once_per_distinct_length_and_size():
    lengths = [100, 5000, 100, 20000, 5000, 3, 20000, 77777]
    calls = []

    def cost(length, cp):
        calls.append((length, cp))
        return length * (1 + length / 4096) / cp

    dcpp.plan(lengths, 16, 8192, estimator=cost)
    assert len(calls) == len(set(calls))
    # each distinct length at every power-of-two size from its smallest feasible one
    expected = set()
    for n in set(lengths):
        cp = 1
        while -(-n // (2 * cp)) * 2 > 8192:
            cp *= 2
        while cp <= 16:
            expected.add((n, cp))
            cp *= 2
    assert set(calls) == expected


def test_a_cost_that_rises_with_the_size_plans_at_every_topology_and_max_cp():
    # the planner asked the table for sizes it does not hold (6 of 16 ranks, halves above
    # max_cp): "the planner asked for cost(17893, 6), which the cost table does not hold"
    lengths = np.random.default_rng(0).lognormal(8, 1.2, 500).astype(np.int64) + 1

    def cost(length, cp):
        return 1e-6 * length * cp

    for kwargs in ({}, {"max_cp": 8}, {"topology": "contiguous", "max_cp": 8}):
        plan = dcpp.plan(lengths, 16, 16384, estimator=cost, **kwargs)
        plan.validate()
        assert plan.metrics["efficiency"] <= 1


@pytest.mark.parametrize(
    "cost, message",
    [
        (lambda n, cp: float("nan"), "= nan; a cost must be finite"),
        (lambda n, cp: -1.0, "= -1; a cost must be finite and >= 0"),
        (lambda n, cp: float("inf"), "= inf"),
        (lambda n, cp: "fast", "returned 'fast', not a number"),
        # a huge value is shown cut (it was all 401 digits), and said to be past a double
        (lambda n, cp: 10**400, "returned an integer of 401 digits, past the largest double"),
        (lambda n, cp: [0.5] * 1000, "returned " + repr([0.5] * 1000)[:40] + "... (5000 characters), not a number"),
        # cut by characters, not bytes (a cut inside a character was a UnicodeDecodeError)
        (lambda n, cp: "é" * 100, "returned " + repr("é" * 100)[:40] + "... (102 characters), not a number"),
    ],
)
def test_bad_costs_are_refused_with_the_length_and_size(cost, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        dcpp.plan([100, 2000], 4, 4096, estimator=cost)


def test_an_exception_in_the_cost_reaches_the_caller():
    def cost(n, cp):
        raise KeyError(f"no timing for {n}")

    with pytest.raises(KeyError, match="no timing for"):
        dcpp.plan([100, 2000], 4, 4096, estimator=cost)


def test_planning_from_threads_gives_identical_plans():
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 30000, 4096)
    results = [None] * 4

    def work(i):
        results[i] = dcpp.plan(lengths, 64, 16384).to_json()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({strip_timing(r) for r in results}) == 1


# ---- the plan object ------------------------------------------------------------------------


def test_json_round_trip_svg_and_validate():
    p = dcpp.plan([1830, 65536, 412, 7000, 300, 24000, 900, 2500], 16, 8192, padding_unit=8)
    q = dcpp.Plan.from_json(p.to_json())
    assert q == p and q.to_json() == p.to_json()
    assert q.options["padding_unit"] == 8
    assert p.svg("t").lstrip().startswith("<svg")
    # any title is well-formed XML (an '&' or a '<' made it malformed)
    root = xml.etree.ElementTree.fromstring(p.svg("R&D <\"1\"> \x01 é"))
    assert root.find("{http://www.w3.org/2000/svg}text").text == "R&D <\"1\"> \ufffd é"
    p.validate()
    doc = json.loads(p.to_json())
    doc["microbatches"][0]["groups"][0]["samples"].append(0)  # sample 0 twice
    with pytest.raises(ValueError, match="sample 0 appears twice"):
        dcpp.Plan.from_json(json.dumps(doc))
    with pytest.raises(ValueError, match="world_size"):
        dcpp.Plan.from_json('{"format": "dcpp-plan/1"}')
    with pytest.raises(ValueError, match="not valid JSON"):
        dcpp.Plan.from_json("{")


def test_from_json_refuses_a_plan_that_is_not_one():
    # read unchecked, these routed (a sample id past the lengths read past them in C++), drew
    # and counted "-8 ranks", or failed in rank_samples with "list assignment index out of range"
    p = dcpp.plan([1830, 65536, 412, 7000, 300], 16, 8192)

    def edited(edit):
        doc = json.loads(p.to_json())
        edit(doc)
        return json.dumps(doc)

    def group(doc):
        return doc["microbatches"][0]["groups"][0]

    cases = [
        (lambda d: d.update(world_size=-8), "world_size = -8 differs from the options' 16"),
        (lambda d: group(d).update(samples=[99]), "sample id 99 is outside [0, 5)"),
        (lambda d: group(d).update(first_rank=2**30), "is not a legal aligned group"),
        (lambda d: group(d).update(samples=[]), "no samples"),
        (lambda d: d["lengths"].__setitem__(0, -1), "sample 0: length = -1 must be positive"),
    ]
    for edit, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            dcpp.Plan.from_json(edited(edit))


@pytest.mark.parametrize("padding_unit", [1, 4])
def test_routes_cover_every_token_once_in_zigzag_order(padding_unit):
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 9000, 97)
    p = dcpp.plan(lengths, 12, 4096, topology="contiguous", padding_unit=padding_unit)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    seen = np.zeros(int(starts[-1]), dtype=np.int64)
    for m in range(len(p)):
        for rank in range(p.world_size):
            r = p.route(m, rank)
            if r["idle"]:
                assert r["index"].size == 0
                continue
            index, pos = r["index"], r["position_ids"]
            real = index >= 0
            seen[index[real]] += 1
            # a real token's position is its offset in its sample
            sample_of = np.searchsorted(starts, index[real], side="right") - 1
            assert np.array_equal(pos[real], index[real] - starts[sample_of])
            assert set(sample_of.tolist()) <= set(r["samples"].tolist())
            assert r["cu_seqlens_padded"][-1] == r["index"].size * r["cp"]
            assert np.all(r["cu_seqlens_padded"] % (2 * r["cp"] * padding_unit) == 0)
    assert np.all(seen == 1)
    with pytest.raises(IndexError):
        p.route(len(p), 0)
    with pytest.raises(IndexError):
        p.route(0, p.world_size)


def test_plan_methods_name_a_bad_argument():
    # each was nanobind's "incompatible function arguments" with the whole signature (route,
    # from_json, svg) or Python's "tuple indices must be integers" (rank_samples)
    p = dcpp.plan([100, 5000, 20000, 700, 9000], 8, 4096)
    cases = [
        (lambda: p.route(0, "1"), TypeError, "rank: expected an integer, got str '1'"),
        (lambda: p.route(0, 2**70), ValueError, "rank = 1180591620717411303424 must be an integer from"),
        (lambda: p.route(-1, 0), IndexError, f"microbatch -1 is out of range: the plan has {len(p)}"),
        (lambda: p.route(0, 0, padding_unit="2"), TypeError, "padding_unit: expected an integer, got str '2'"),
        (lambda: p.route(0, 0, padding_unit=0), ValueError, "padding_unit = 0 must be >= 1"),
        (lambda: p.rank_samples(1.0), TypeError, "microbatch: expected an integer, got float 1.0"),
        (lambda: p.rank_samples(99), IndexError, f"microbatch 99 is out of range: the plan has {len(p)}"),
        (lambda: dcpp.Plan.from_json(5), TypeError, "from_json: expected a str or bytes, got int"),
        (lambda: p.svg(5), TypeError, "svg: title: expected a str, got int 5"),
        (lambda: dcpp.verl.rank_schedule(p, "0"), TypeError, "rank: expected an integer, got str '0'"),
    ]
    for call, exc, message in cases:
        with pytest.raises(exc, match=re.escape(message)):
            call()
    # numpy integers index, a negative micro-batch counts from the end in rank_samples, and
    # UTF-8 bytes read as JSON
    assert sorted(p.route(np.int64(0), np.int32(1))) == sorted(p.route(0, 1))
    assert all(np.array_equal(a, b) for a, b in zip(p.rank_samples(-1), p.rank_samples(len(p) - 1)))
    assert dcpp.Plan.from_json(p.to_json().encode()) == p


# ---- hostile input, round 3 (issue 58) ------------------------------------------------------


def test_a_mapping_of_lengths_is_refused_not_planned_by_its_keys():
    import collections

    for mapping in ({7: 4000, 9: 100}, collections.Counter({4000: 2, 100: 1})):
        with pytest.raises(TypeError, match="maps ids to lengths and iterates its keys"):
            dcpp.plan(mapping, 8, 4096)
    # its values, given as a list, plan
    assert len(dcpp.plan(list({7: 4000, 9: 100}.values()), 8, 4096).lengths) == 2


def test_plan_arrays_are_read_only():
    p = dcpp.plan([4000, 100, 9000, 300], 4, 4096)
    g = p.microbatches[0].groups[0]
    before = [a.tolist() for a in p.rank_samples(0)]
    with pytest.raises(ValueError, match="read-only"):
        g.samples[0] = 10**9
    assert [a.tolist() for a in p.rank_samples(0)] == before
    p.validate()


def test_topology_must_be_a_name():
    with pytest.raises(TypeError, match=re.escape("topology: expected a name (aligned, contiguous or megatron), got NoneType None")):
        dcpp.plan([100, 200], 4, 4096, topology=None)


def test_a_cost_that_falls_with_the_length_is_refused():
    with pytest.raises(ValueError, match=re.escape("estimator: cost(200, 1) = 5000 is below cost(100, 1) = 10000: a cost must not fall as the length grows")):
        dcpp.plan([100, 200, 300], 4, 4096, estimator=lambda n, cp: 1e6 / n / cp)
