"""What the fleet runs, read side: served revisions, nodes, topologies, before/after figures.

Cut by page: ``served`` (the catalog's served revisions and filters), ``nodes`` (/nodes/, its needing-action
list and a node's page; ``ranking`` picks each node's rows, ``serving`` builds and judges them), ``topology``
(a topology's page), ``compare`` and ``plans`` (a package page's fleet section: before/after, each node's
plan); what several pages share in modules of their own: ``window`` (the window and its cells), ``figures``
(a group's reports, sketches and strategies in the window), ``stages`` (who holds which layers), ``runs``
(what the nodes' agents registered), ``names`` (how a row names its revision) and ``sql`` (lists of keys).

Owns: what every fleet page reads of models.Serving, LastServed, Rollup, RevisionRollup, NodeRollup, NodeRun
and the raw reports' topologies. Never imports: a service that writes (ingest, reports, rollups/ beyond
``rollups.cells.hourly_since``), the tasks, web/ or the Hub; selectors only, they never write.
Callers import each name from the module that owns it: this file imports nothing.

Selectors only (services layer, read side): they read models and call throughput's public aggregates,
never write, and issue a fixed number of queries however many nodes or reports exist. Which revisions
nodes ran in a window ("served in the last N days"), by how many nodes, and whether MTP went unused
there come from models.Serving (a row per revision x node x topology x split, with its last report
and its last one showing MTP unused), so the catalog's served-revision filters and the nodes pages
cost what the revisions x nodes cost, not what the reports or the days do. What the rows shown did
inside the window (reports, medians from the rollups' sketches, within 1 %) comes from their node's
NodeRollup cells, every strategy and topology in one (day cells for whole days; the window's first
day by its hours, or as its day cell less the hours before the window, whichever is fewer cells:
``window_terms``; ``window_cells`` for the catalog's every-node cells, RevisionRollup's). The topology page
reads the Rollup cells of its topology, the before/after comparison the two revisions' total cells
(RevisionRollup's, every topology in one, or each node's Rollup cells when a release is held equal). Raw
reports are read only for the stage layout of a shown row's newest report.
/nodes/ is paged (NODES_PER_PAGE); each node's rows start from its few busiest Serving rows, read in
index order (a limited, correlated subquery), so a node that served thousands of revisions costs what
one that served three does; where the nodes' rows in the window are fewer than the page shows of them
(a thousand nodes running a few revisions each), all of them are read in one query instead.
"""
