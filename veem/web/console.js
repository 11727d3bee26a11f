// The web console's terminal: xterm.js attached to the VEE's console
// WebSocket (binary frames both ways), fitted to its box.
(function () {
  const box = document.getElementById("terminal");
  const state = document.getElementById("console-state");
  const term = new Terminal({ convertEol: false, cursorBlink: true, fontSize: 14 });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();
  window.addEventListener("resize", () => fit.fit());
  const ws = new WebSocket("wss://" + location.host + "/vees/" + encodeURIComponent(box.dataset.vee) + "/console/ws");
  ws.binaryType = "arraybuffer";
  ws.addEventListener("open", () => { state.textContent = "attached"; term.focus(); });
  ws.addEventListener("close", () => { state.textContent = "detached"; });
  term.loadAddon(new AttachAddon.AttachAddon(ws));
  // For tests and screen readers: the text shown so far.
  window.veeConsole = { term: term, text: () => { const b = term.buffer.active; let t = ""; for (let i = 0; i < b.length; i++) { t += b.getLine(i).translateToString(true) + "\n"; } return t; } };
})();
