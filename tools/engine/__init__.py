"""The certification engine: the runner (certify: ``certify(RunOptions)``, its one entry point), its
workers (worker, isolation, shards, the implementation host), the reports (report, junit) and the test
lists.  The tools are argparse front ends that call into it (tools/certify_cells.py builds the options of
a run)."""
