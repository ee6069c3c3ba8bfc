"""The packages, read side: the catalog page, a package's and a revision's pages, the ingest page.

Cut by page: ``listing`` (the catalog's rows: the packages the filters keep, in order, one page of them with
their fix pull requests) and ``facets`` (its counts per verdict and status, and the architectures), both on
``filters`` (the validated filters and their conditions); ``lookups`` (what a package or revision page
resolves: the package, the revision a ref names, its history, its fix proposal, and the stored revision a
checked manifest matches); ``files`` (a revision's files: a page, the overview, one file, its GGUF
metadata); ``diff`` (two revisions compared); ``ingest_status`` (the ingest page); ``throughput`` (the
catalog's decode-rate columns and its alert filter's condition); and ``errors`` (what a lookup raises,
which every page's edge answers 404 or 400 for).

Owns: what those pages read of models.Package, Revision, PackageFile, FixProposal and TrackRequest, and three
reads of what nodes ran: LastServed's packages with MTP unused (the alert filter) and with an older, broken
revision served (the facets), and the every-node Serving rows' first report of each revision (the package
page's history).
Never imports: a service that writes (ingest, tracking, reports, rollups/, fix_plans, fix_proposals), the
tasks, web/ or the Hub; selectors only, they never write. What nodes ran comes from fleet/ (``served``,
``window``), the stored sketches' reading from packages_app.throughput. Callers import each name from the
module that owns it: this file imports nothing.

Every selector issues a fixed number of queries, independent of how many packages, revisions or reports
exist, so pages stay fast at scale (tests pin the counts).
"""
