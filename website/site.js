// Writes this site's own address into the examples, so the commands on the page are the ones to
// type against this deployment (the page itself names opentunnel.xyz).
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  for (const element of document.querySelectorAll(".domain")) element.textContent = location.host;
  for (const element of document.querySelectorAll(".domain-name")) {
    element.textContent = location.hostname;
  }
  for (const element of document.querySelectorAll(".origin")) element.textContent = location.origin;
});
