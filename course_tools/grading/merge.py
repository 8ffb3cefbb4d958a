"""``course-grade merge SHARD_DIR... --out DIR``: one gradebook from the output folders of
``course-grade --shard K/N`` runs, identical, byte for byte, to a single run's."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .options import parse_exports
from .report import read_results, summary_table, write_all, write_exports


def write_json(path: Path, data: dict) -> None:
    from .report import atomic_write

    atomic_write(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def merge_main(argv: list[str]) -> int:
    """``course-grade merge SHARD_DIR... --out DIR``: one gradebook from N shards."""
    p = argparse.ArgumentParser(
        prog="course-grade merge",
        description="Combine the output folders of `course-grade --shard K/N` runs into one "
        "gradebook, identical to what a single run would have written.",
    )
    p.add_argument("shards", nargs="+", type=Path, metavar="SHARD_DIR")
    p.add_argument("--out", required=True, type=Path, metavar="DIR")
    p.add_argument("--export", type=parse_exports, default=[], metavar="WHAT")
    p.add_argument("--student", metavar="REGEX", default=None)
    args = p.parse_args(argv)
    infos, results = [], []
    for d in args.shards:
        try:
            info = json.loads((d / "run.json").read_text())
            part = read_results(d)
        except (OSError, ValueError) as err:
            print(f"error: {d} is not a course-grade output folder: {err}", file=sys.stderr)
            return 2
        infos.append((d, info))
        results += part
    problems = _merge_problems(infos, results)
    if problems:
        for line in problems:
            print(f"error: {line}", file=sys.stderr)
        return 2
    info = infos[0][1]
    provenance = {"course_commit": info["course_commit"], "grader_version": info["grader_version"]}
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    results.sort(key=lambda r: r["submission"])
    skipped = write_all(out, results, provenance, info["all_submissions"], args.student)
    (out / "results.jsonl").write_text(
        "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in results)
    )
    if args.export:
        write_exports(out, results, args.export, args.student)
    merged = dict(
        info,
        shard=None,
        submissions=info["all_submissions"],
        complete=True,
        graded=len(results),
        merged_from=[str(d) for d, _ in infos],
    )
    write_json(out / "run.json", merged)
    for path in skipped:
        print(f"warning: not written, its folder leads outside {out}: {path}", file=sys.stderr)
    print(summary_table(results))
    print(f"\nmerged {len(infos)} shard(s), {len(results)} submission(s) -> {out / 'grades.csv'}")
    return 0


def _merge_problems(infos: list[tuple[Path, dict]], results: list[dict]) -> list[str]:
    problems = []
    shards = [i["shard"] for _, i in infos if i.get("shard") is not None]
    if len(shards) != len(infos):
        problems.append("every folder must come from a `--shard K/N` run")
        return problems
    splits = {s[1] for s in shards}
    if len(splits) != 1:
        problems.append(f"the shards come from different splits (N = {sorted(splits)})")
        return problems
    (n,) = splits
    ks = sorted(s[0] for s in shards)
    if ks != list(range(1, n + 1)):
        have = ", ".join(map(str, ks))
        problems.append(f"expected shards 1..{n} once each, got {have}")
    for key, what in (
        ("seed_fingerprint", "seeds"),
        ("course_commit", "course commits"),
        ("grader_version", "grader versions"),
        ("partial", "--partial settings"),
        ("all_submissions", "lists of submissions (different inputs?)"),
    ):
        if len({json.dumps(i.get(key), sort_keys=True) for _, i in infos}) != 1:
            problems.append(f"the shards used different {what}")
    for d, i in infos:
        if not i.get("complete"):
            problems.append(f"{d} is an incomplete run (it was stopped): grade that shard again")
    ids = [r["submission"] for r in results]
    if len(ids) != len(set(ids)):
        problems.append("a submission was graded in two shards")
    expected = set(infos[0][1].get("all_submissions", []))
    if not problems and set(ids) != expected:
        problems.append(f"{len(expected - set(ids))} submission(s) are missing from the shards")
    return problems
