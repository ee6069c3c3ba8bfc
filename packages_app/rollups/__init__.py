"""Services that keep the report rollups (models.Rollup): added to as reports are stored, pruned, rebuilt.

Cut by concern: ``adding`` (the store paths' one door: ``add_reports``, ``add_report_ids``, ``link_reports``),
``cells`` (the cells a batch adds to and what each report adds), ``public_weight`` (whose reports the
every-node cells count), ``upsert`` (adding them to Rollup, RevisionRollup, NodeRollup, PlanRollup and
SplitRollup in SQL), ``quartiles`` (the decode-rate quartiles of each timeline point, kept on its
RevisionRollup rows), ``serving`` (who served what: Serving and LastServed) and ``rebuild`` (pruning hour
cells, rebuilding from the raw reports).

Owns: every write to models.Rollup, RevisionRollup, NodeRollup, PlanRollup, SplitRollup, Serving and
LastServed. Never imports: a selector (fleet/, catalog/, throughput, node_plans), the tasks, web/ or the
Hub. Callers import each name from the module that owns it: this file imports nothing.

Exactly once, without a task: the store paths (reports.store_report, reports.store_reports,
telemetry's span insert) and the paths that link stored reports to a revision call ``add_reports``
with the rows *they* inserted or linked, inside the transaction that inserted or linked them. Either
both the rows and their figures commit or neither does; a replay inserts nothing and adds nothing;
a worker killed mid-way rolls both back. The upsert adds to the stored cells in SQL (counts and sums
add, minimum and maximum compare, sketches add bin by bin), its rows sorted by key so that two
batches touching the same cells lock them in the same order (no deadlock).

Per report, cells of six grains: (node, hour), (node, day), (node, total) and the same for all nodes
(``node_key = 0``). The every-node cells are added up over their topologies into models.RevisionRollup
in the same transaction, which the pages read (the topologies grow with the nodes, a revision's
strategies and splits do not), each row with the decode-rate quartiles of its timeline point
(``quartiles``): a package page reads its revision's total cells and one day (or hour) series, never the
reports; the catalog reads total cells; the topology page reads Rollup's every-node
cells of its topology. Hour cells older than MESHDASH_ROLLUP_HOURLY_DAYS are not written and are pruned
(``prune_hourly``): the day cells hold them already.

Who moves a public figure (docs/fleet.md, "Whose reports make a public figure"; ``public_weight``): the
every-node cells, which every public figure is read from, count a report only when its node registered a
run of its revision, and at most MESHDASH_PUBLIC_REPORTS_PER_NODE_DAY of one node's reports of one revision
a day, the first that arrived. Every report still goes to its node's own cells. A node that registers a
run of a revision it already reported on has those reports added to the every-node cells then
(``adding.add_registered_reports``), under the same daily cap.

Beside them, per node, its hour and day cells with every strategy and topology together
(models.NodeRollup: reports, decode-rate sketch, reports per strategy), which the nodes pages read; and its
total cells added up over MTP used and topologies, one row a plan (models.PlanRollup: node, stage split,
requested and effective strategy), which the package page's plans, node count and alert read; and over
strategies and topologies, one row a node's stage split with MTP used or not (models.SplitRollup), which
the speedups pair MTP on with MTP off from. And the same transaction adds to models.Serving (per
revision x node x topology x split: reports, first and last arrival, last report showing MTP unused),
derived from the batch's total cells, so "which revisions did nodes run since T" is a comparison per
Serving row, not a sum over cells; and to models.LastServed (per revision: the newest of its every-node
Serving rows' times), so "did nodes run this revision since T" is one comparison.

Quantiles: packages_app.sketch, a fixed log-bucket histogram (DDSketch's mapping) written by this
module, not the ``ddsketch`` package and not PostgreSQL's percentile_cont, because: merging is
adding integer counts per bin, which SQL can do inside the upsert on both PostgreSQL and SQLite
(a DDSketch object or a t-digest would need a read-modify-write in Python, and t-digest merges
are not exact); the relative error bound is fixed (1 %) whatever the data; a report costs one bin
increment and a cell's sketch is a JSON object of a few tens of bins, and the same numbers come out
on SQLite, so medians are medians there too.
"""
