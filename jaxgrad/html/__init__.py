"""Pages a browser opens from a file: the backprop explorer, the parity report
(``jaxgrad.html.report``) and the doctor's report (``jaxgrad.html.doctor``, drawn with
the parity report's machinery).

- ``export_graph(fn, *args)``: a scalar function's graph as JSON data the explorer
  page interprets (``jaxgrad.html.export``);
- ``explorer_page(graph, torch=…)``: the self-contained explorer page;
- ``write_page(path, text)``: atomic write, nothing half-written on failure.
"""

from jaxgrad.html.export import SUPPORTED, export_graph
from jaxgrad.html.page import check_writable, explorer_page, write_page
