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
    themeFigure(figure.data, layout, theme(element));
    window.Plotly.react(element, figure.data, layout, {
      responsive: true,
      displaylogo: false,
      // On a phone the toolbar covers the title; the chart stays zoomable by touch.
      displayModeBar: element.clientWidth >= 600 ? "hover" : false,
      modeBarButtonsToRemove: ["select2d", "lasso2d"],
    });
  }

  // What charts/ draws in the page's text colour (charts.common.INK); recoloured to the scheme's --fg.
  var INK = "#212529";

  // The page's colours, from its CSS variables: they follow prefers-color-scheme (meshdash.css).
  function theme(element) {
    var style = window.getComputedStyle(document.body);
    var holder = window.getComputedStyle(element.closest("section") || document.body);
    function css(name, fallback) {
      return style.getPropertyValue(name).trim() || fallback;
    }
    return {
      fg: css("--fg", style.color),
      muted: css("--muted", style.color),
      line: css("--line", "#dee2e6"),
      // The chart sits on its section's card: both backgrounds take the card's colour.
      bg: holder.backgroundColor && holder.backgroundColor !== "rgba(0, 0, 0, 0)" ? holder.backgroundColor : css("--card", "#fff"),
    };
  }

  function inked(colour, fg) {
    return typeof colour === "string" && colour.toLowerCase() === INK ? fg : colour;
  }

  // Plot and paper backgrounds, grid, fonts, annotations, legend and the ink traces in the page's colours.
  function themeFigure(data, layout, colours) {
    layout.paper_bgcolor = colours.bg;
    layout.plot_bgcolor = colours.bg;
    layout.font = Object.assign({}, layout.font, { color: colours.fg });
    layout.legend = Object.assign({}, layout.legend, { bgcolor: colours.bg, font: { color: colours.fg } });
    layout.hoverlabel = Object.assign({ bgcolor: colours.bg, bordercolor: colours.line, font: { color: colours.fg } }, layout.hoverlabel);
    ["xaxis", "yaxis", "yaxis2"].forEach(function (axis) {
      if (layout[axis]) {
        layout[axis] = Object.assign({}, layout[axis], { gridcolor: colours.line, zerolinecolor: colours.line, linecolor: colours.line });
      }
    });
    (layout.annotations || []).forEach(function (note) {
      note.font = Object.assign({}, note.font, { color: colours.fg });
    });
    (layout.shapes || []).forEach(function (shape) {
      if (shape.line) {
        shape.line.color = inked(shape.line.color, colours.fg);
      }
    });
    data.forEach(function (trace) {
      if (trace.line) {
        trace.line.color = inked(trace.line.color, colours.fg);
      }
      if (trace.marker) {
        trace.marker.color = inked(trace.marker.color, colours.fg);
      }
      if (trace.mode && trace.mode.indexOf("text") !== -1) {
        trace.textfont = Object.assign({}, trace.textfont, { color: colours.fg });
      }
    });
  }

  // On a narrow screen smaller titles and margins.
  function fitLayout(layout, element) {
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
      // "custom" waits for its dates (and the Show button); the other choices apply at once.
      var dates = select.form ? select.form.querySelector("input[type=date]") : null;
      if (select.value === "custom" && dates) {
        dates.focus();
      } else if (select.form) {
        select.form.submit();
      }
    });
    // Typing a date means a custom range.
    if (select.form) {
      select.form.querySelectorAll("input[type=date]").forEach(function (input) {
        input.addEventListener("change", function () {
          select.value = "custom";
        });
      });
    }
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
    // The scheme can change while the page is open (the system's dark mode at dusk): redraw in its colours.
    if (window.matchMedia) {
      var scheme = window.matchMedia("(prefers-color-scheme: dark)");
      var redraw = function () {
        drawInTurn(Array.prototype.slice.call(document.querySelectorAll("[data-chart]")));
      };
      if (scheme.addEventListener) {
        scheme.addEventListener("change", redraw);
      }
    }
    document.querySelectorAll("button[data-copy-target]").forEach(wireCopy);
  });
})();
