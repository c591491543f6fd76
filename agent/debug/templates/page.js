// Refresh (unless paused), the age of the data, and sorting the pod table. The period is the body's data-refresh;
// the pause and the sort survive the reload through sessionStorage.
(function () {
  var every = parseInt(document.body.dataset.refresh, 10);
  var store = window.sessionStorage, button = document.getElementById("pause");
  var paused = store.getItem("nra-paused") === "1";
  function show() {
    button.textContent = paused ? "Resume auto-refresh" : "Pause auto-refresh";
    button.setAttribute("aria-pressed", paused ? "true" : "false");
    document.getElementById("refresh-state").textContent =
      paused ? "auto-refresh paused" : "refreshes every " + every + " s";
  }
  button.addEventListener("click", function () {
    paused = !paused;
    store.setItem("nra-paused", paused ? "1" : "0");
    show();
  });
  show();
  setInterval(function () { if (!paused) location.reload(); }, every * 1000);

  var updated = document.getElementById("updated"), rendered = parseFloat(updated.dataset.time);
  function age() {
    var seconds = Math.max(0, Math.round(Date.now() / 1000 - rendered));
    document.getElementById("age").textContent = "(" + seconds + " s ago)";
  }
  age();
  setInterval(age, 1000);

  var table = document.getElementById("pods"), heads = table.tHead.rows[0].cells, body = table.tBodies[0];
  function key(row, column) {
    var cell = row.cells[column];
    return cell.dataset.sort !== undefined ? parseFloat(cell.dataset.sort) : cell.textContent.toLowerCase();
  }
  function sortBy(column, direction) {
    var rows = Array.prototype.slice.call(body.rows), sign = direction === "ascending" ? 1 : -1;
    rows.sort(function (a, b) {
      var x = key(a, column), y = key(b, column);
      return x < y ? -sign : x > y ? sign : 0;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    for (var i = 0; i < heads.length; i++) { heads[i].removeAttribute("aria-sort"); }
    heads[column].setAttribute("aria-sort", direction);
  }
  Array.prototype.forEach.call(heads, function (head, column) {
    head.title = "sort by " + head.textContent;
    head.addEventListener("click", function () {
      var numeric = head.classList.contains("n"), current = head.getAttribute("aria-sort");
      var direction = current ? (current === "ascending" ? "descending" : "ascending")
                              : (numeric ? "descending" : "ascending");
      store.setItem("nra-sort", column + ":" + direction);
      sortBy(column, direction);
    });
  });
  var saved = (store.getItem("nra-sort") || "").split(":");
  if (saved.length === 2 && heads[+saved[0]]) { sortBy(+saved[0], saved[1]); }
})();
