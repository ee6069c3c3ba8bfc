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
    window.Plotly.newPlot(element, figure.data, figure.layout, {
      responsive: true,
      displaylogo: false,
      modeBarButtonsToRemove: ["select2d", "lasso2d"],
    });
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

  // A select marked data-autosubmit applies on change; its form keeps a submit button for no-JS use.
  function wireAutosubmit(select) {
    select.addEventListener("change", function () {
      if (select.form) {
        select.form.submit();
      }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("select[data-autosubmit]").forEach(wireAutosubmit);
    document.querySelectorAll("[data-chart]").forEach(drawChart);
    document.querySelectorAll("button[data-copy-target]").forEach(wireCopy);
  });
})();
