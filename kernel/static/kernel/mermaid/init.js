// Draws the saga admin's <pre class="mermaid"> (kernel/saga_admin.py) once the page has loaded. A
// file, not inline: the Content-Security-Policy allows scripts from this origin only.
// "strict": labels are escaped and a diagram's clicks run nothing. The theme follows the admin's
// (its theme switch, else the system's): "neutral" on the light one, "dark" on the dark one.
(() => {
  const chosen = document.documentElement.dataset.theme;
  const dark = chosen === "dark" || (chosen !== "light" && matchMedia("(prefers-color-scheme: dark)").matches);
  mermaid.initialize({ startOnLoad: true, theme: dark ? "dark" : "neutral", securityLevel: "strict" });
})();
