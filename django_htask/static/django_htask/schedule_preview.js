/* django-htask admin: preview the next runs while the schedule or zone is typed.
   Reads the preview URL from #htask-live-preview[data-url]; GET only, no state change. */
"use strict";
(function () {
  function render(box, data) {
    box.textContent = "";
    if (data.error) {
      var p = document.createElement("p");
      p.className = "htask-preview-error errornote";
      p.textContent = data.error;
      box.appendChild(p);
      return;
    }
    if (!data.runs.length) {
      box.textContent = "none: the schedule will not fire again";
      return;
    }
    var table = document.createElement("table");
    table.className = "htask-preview";
    var head = table.createTHead().insertRow();
    [data.zone, "UTC"].forEach(function (text) {
      var th = document.createElement("th");
      th.textContent = text;
      head.appendChild(th);
    });
    var body = table.createTBody();
    data.runs.forEach(function (run) {
      var row = body.insertRow();
      row.insertCell().textContent = run.local;
      row.insertCell().textContent = run.utc;
    });
    box.appendChild(table);
  }

  function start() {
    var box = document.getElementById("htask-live-preview");
    var schedule = document.getElementById("id_schedule");
    var zone = document.getElementById("id_timezone");
    if (!box || !schedule) {
      return;
    }
    var timer = null;
    var sent = 0;
    function update() {
      var text = schedule.value.trim();
      if (!text) {
        return;
      }
      var query = new URLSearchParams({ schedule: text, timezone: zone ? zone.value : "" });
      var mine = ++sent;
      fetch(box.dataset.url + "?" + query.toString(), { credentials: "same-origin" })
        .then(function (response) { return response.json(); })
        .then(function (data) { if (mine === sent) { render(box, data); } })
        .catch(function () { /* the form still validates on save */ });
    }
    function later() {
      clearTimeout(timer);
      timer = setTimeout(update, 300);
    }
    schedule.addEventListener("input", later);
    if (zone) {
      zone.addEventListener("input", later);
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
