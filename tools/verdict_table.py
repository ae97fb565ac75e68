"""tools/verdict-table: the op x implementation table (every oracle's verdict, worst error next to the
stock op's, time next to ours) from run reports and bench tables the tools wrote."""
from __future__ import annotations

import json
import pathlib

from tools.cli import ArgumentParser, UsageError, run_tool
from tools.engine.verdict_table import html_table, markdown, table


def main(argv=None) -> int:
    parser = ArgumentParser(prog="tools/verdict-table", description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", metavar="REPORT.json", help="tools/certify-cells --report files")
    parser.add_argument("--bench", action="append", default=[], metavar="TABLE.md",
                        help="a tools/bench --out table (repeatable)")
    parser.add_argument("--html", action="store_true", help="print an HTML table instead of markdown")
    args = parser.parse_args(argv)
    for path in [*args.reports, *args.bench]:
        if not pathlib.Path(path).is_file():
            raise UsageError(f"{path}: no such file")
    try:
        rows = table(args.reports, args.bench)
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as error:
        raise UsageError(f"not a certify-cells run report: {type(error).__name__}: {error}") from None
    except ValueError as error:
        raise UsageError(f"--bench: {error}") from None
    print(html_table(rows) if args.html else markdown(rows))
    return 0


if __name__ == "__main__":
    run_tool(main)
