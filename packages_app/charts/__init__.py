"""Pure chart building: audit and throughput data in, plotly figure dicts out; no Django, no I/O.

The dicts go to the page through ``chart_json`` (the bytes of Django's ``json_script``, faster:
templatetags/chart_data.py) and static/packages_app/charts.js draws them. One module per
chart family (layers, timelines, compare) on what they share (common); callers import from each.
"""
