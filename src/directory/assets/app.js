// Progressive enhancement only: the page works without it. Shows the "Copy JSON" button
// where the clipboard can be written.
document.addEventListener("DOMContentLoaded", () => {
  for (const button of document.querySelectorAll("button[data-copy]")) {
    const target = document.getElementById(button.dataset.copy);
    if (!target || !navigator.clipboard) continue;
    button.hidden = false;
    button.addEventListener("click", async () => {
      await navigator.clipboard.writeText(target.textContent);
      button.textContent = "Copied";
    });
  }
});
