// Draws every chart whose figure the page embedded with json_script, and wires the copy buttons.
// A static file (no inline script), so a strict Content-Security-Policy can forbid inline code.
(function () {
  "use strict";

  function drawChart(element) {
    var source = document.getElementById(element.getAttribute("data-chart"));
    if (!source || !window.Plotly) {
      return;
    }
    var figure = JSON.parse(source.textContent);
    if (!figure || !figure.data) {
      return;
    }
    var layout = fitLayout(figure.layout || {}, element);
    window.Plotly.newPlot(element, figure.data, layout, {
      responsive: true,
      displaylogo: false,
      // On a phone the toolbar covers the title; the chart stays zoomable by touch.
      displayModeBar: element.clientWidth >= 600 ? "hover" : false,
      modeBarButtonsToRemove: ["select2d", "lasso2d"],
    });
  }

  // Text in the page's own colours (dark mode too), and on a narrow screen smaller titles and margins.
  function fitLayout(layout, element) {
    var style = window.getComputedStyle(document.body);
    var fg = style.color;
    var line = style.getPropertyValue("--line").trim() || "#dee2e6";
    layout.font = Object.assign({}, layout.font, { color: fg });
    ["xaxis", "yaxis", "yaxis2"].forEach(function (axis) {
      if (layout[axis]) {
        layout[axis] = Object.assign({ gridcolor: line, zerolinecolor: line, linecolor: line }, layout[axis]);
      }
    });
    if (element.clientWidth < 600) {
      layout.margin = { l: 48, r: 40, t: 64, b: 80 };
      if (layout.title && layout.title.text) {
        layout.title = Object.assign({}, layout.title, { font: { size: 13 }, x: 0, xanchor: "left" });
        layout.title.text = wrapTitle(layout.title.text, 38);
      }
    }
    return layout;
  }

  function wrapTitle(text, width) {
    var words = text.split(" ");
    var lines = [""];
    words.forEach(function (word) {
      var last = lines.length - 1;
      if (lines[last] && (lines[last] + " " + word).length > width) {
        lines.push(word);
      } else {
        lines[last] = lines[last] ? lines[last] + " " + word : word;
      }
    });
    return lines.join("<br>");
  }

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    // Fallback for plain-http deployments, where the async clipboard API is unavailable.
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    document.execCommand("copy");
    document.body.removeChild(area);
    return Promise.resolve();
  }

  function wireCopy(button) {
    button.addEventListener("click", function () {
      var target = document.getElementById(button.getAttribute("data-copy-target"));
      if (!target) {
        return;
      }
      copyText(target.textContent).then(function () {
        button.textContent = "Copied";
        button.classList.add("copied");
        window.setTimeout(function () {
          button.textContent = "Copy";
          button.classList.remove("copied");
        }, 2000);
      }, function () {
        button.textContent = "Copy failed";
      });
    });
  }

  // One chart per frame, in page order: the first one is on screen before the next is built.
  function drawInTurn(charts) {
    if (!charts.length) {
      return;
    }
    drawChart(charts.shift());
    window.requestAnimationFrame(function () {
      drawInTurn(charts);
    });
  }

  // A select marked data-autosubmit applies on change; its form keeps a submit button for no-JS use.
  function wireAutosubmit(select) {
    select.addEventListener("change", function () {
      if (select.form) {
        select.form.submit();
      }
    });
  }

  // A table wider than the screen scrolls sideways: make it reachable and scrollable from the keyboard.
  function wireScrollable(wrap) {
    if (wrap.scrollWidth <= wrap.clientWidth) {
      return;
    }
    var section = wrap.closest("section");
    var heading = section ? section.querySelector("h2, h3") : null;
    wrap.setAttribute("tabindex", "0");
    wrap.setAttribute("role", "region");
    wrap.setAttribute("aria-label", (heading ? heading.textContent.trim() + ": " : "") + "table, scrolls sideways");
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll(".table-wrap").forEach(wireScrollable);
    document.querySelectorAll("select[data-autosubmit]").forEach(wireAutosubmit);
    drawInTurn(Array.prototype.slice.call(document.querySelectorAll("[data-chart]")));
    document.querySelectorAll("button[data-copy-target]").forEach(wireCopy);
  });
})();
