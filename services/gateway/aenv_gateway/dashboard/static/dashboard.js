// The dashboard's only script: refreshes the sandboxes table every 5 s from the server's
// rendered rows, and adds each event the server streams (SSE) to the top of the events table.
// Pages work without it (every action is a plain form POST).
"use strict";
(function () {
  const status = document.getElementById("refresh-status");
  const rows = document.getElementById("sandbox-rows");
  if (status && rows) {
    setInterval(async function () {
      // Not while the operator is on a button in the table: focus would be lost.
      if (rows.contains(document.activeElement)) return;
      try {
        const response = await fetch(status.dataset.rows, {credentials: "same-origin"});
        if (response.ok) rows.innerHTML = await response.text();
      } catch (e) { /* the next tick tries again */ }
    }, 5000);
  }
  const events = document.getElementById("events-status");
  const eventRows = document.getElementById("event-rows");
  if (events && eventRows && window.EventSource) {
    const source = new EventSource(events.dataset.stream);
    source.onmessage = function (message) {
      const body = document.createElement("tbody");
      body.innerHTML = JSON.parse(message.data);
      if (body.firstElementChild) eventRows.prepend(body.firstElementChild);
    };
    source.addEventListener("end", function () { source.close(); });
  }
})();
