/* django-htask admin: preview the next runs while the schedule, zone or enabled flag is
   edited: the runs the scheduler will fire once the form is saved, in the schedule's
   zone and the site's. Reads the preview
   URL and the edited schedule from #htask-live-preview's data attributes (they also
   give the schedule and zone of a code-defined schedule, whose fields are read-only);
   GET only, no state change. */
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
      box.textContent = data.note;
      return;
    }
    var table = document.createElement("table");
    table.className = "htask-preview";
    var head = table.createTHead().insertRow();
    /* The site's zone is left out when it reads the same as the schedule's. */
    var zones = data.site_zone ? [data.zone, data.site_zone] : [data.zone];
    zones.forEach(function (text) {
      var th = document.createElement("th");
      th.textContent = text;
      head.appendChild(th);
    });
    var body = table.createTBody();
    data.runs.forEach(function (run) {
      var row = body.insertRow();
      row.insertCell().textContent = run.local;
      if (data.site_zone) {
        row.insertCell().textContent = run.site;
      }
    });
    box.appendChild(table);
  }

  function start() {
    var box = document.getElementById("htask-live-preview");
    if (!box) {
      return;
    }
    var schedule = document.getElementById("id_schedule");
    var zone = document.getElementById("id_timezone");
    var enabled = document.getElementById("id_enabled");
    if (!schedule && !enabled) {
      return;
    }
    var timer = null;
    var sent = 0;
    function update() {
      var text = (schedule ? schedule.value : box.dataset.schedule).trim();
      if (!text) {
        return;
      }
      var query = new URLSearchParams({
        schedule: text,
        timezone: zone ? zone.value : box.dataset.timezone,
        enabled: !enabled || enabled.checked ? "1" : "0",
        object: box.dataset.object
      });
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
    [schedule, zone].forEach(function (input) {
      if (input) {
        input.addEventListener("input", later);
      }
    });
    if (enabled) {
      enabled.addEventListener("change", later);
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
