// The events page: the live stream (Server-Sent Events), newest first.
(function () {
  const table = document.getElementById("events");
  const body = table.querySelector("tbody");
  const q = new URLSearchParams();
  if (table.dataset.service) q.set("service", table.dataset.service);
  if (table.dataset.kind) q.set("kind", table.dataset.kind);
  const source = new EventSource("/events/stream?" + q.toString());
  source.addEventListener("message", (m) => {
    const e = JSON.parse(m.data);
    const row = document.createElement("tr");
    for (const v of [e.at || "", e.vee_id, e.kind, e.detail]) {
      const td = document.createElement("td");
      td.textContent = v;
      row.appendChild(td);
    }
    row.dataset.kind = e.kind;
    body.insertBefore(row, body.firstChild);
    while (body.children.length > 500) body.removeChild(body.lastChild);
  });
})();
