(function () {
  "use strict";
  // Static code: the report reaches it only through the DOM (data-*
  // attributes and element text), never as script source.
  var body = document.body;
  body.classList.add("js");
  var grid = document.getElementById("grid");
  var cells = Array.prototype.slice.call(grid.querySelectorAll("a.cell"));
  var details = Array.prototype.slice.call(document.querySelectorAll("section.detail"));
  var hint = document.getElementById("hint");
  var close = document.getElementById("close-details");

  // open shows one result's details in the pane, which is there only
  // while a result is open; open("") closes it.
  function open(id) {
    var found = false;
    details.forEach(function (d) {
      var on = d.id === id;
      d.classList.toggle("open", on);
      found = found || on;
    });
    cells.forEach(function (c) {
      c.classList.toggle("selected", c.getAttribute("href") === "#" + id);
    });
    hint.hidden = found;
    close.hidden = !found;
    body.classList.toggle("details-open", found);
  }

  close.addEventListener("click", function () {
    open("");
  });
  document.addEventListener("keydown", function (e) {
    if (e.key === "Escape") {
      open("");
    }
  });

  grid.addEventListener("click", function (e) {
    var a = e.target.closest("a.cell");
    if (!a) {
      return;
    }
    e.preventDefault();
    open(a.getAttribute("href").slice(1));
  });

  function checked(name) {
    var set = Object.create(null);
    document.querySelectorAll("#filters input[name=" + name + "]").forEach(function (i) {
      if (i.checked) {
        set[i.value] = true;
      }
    });
    return set;
  }

  function apply() {
    var statuses = checked("status");
    var rungs = checked("rung");
    var shown = 0;
    cells.forEach(function (c) {
      var on = c.dataset.status in statuses && c.dataset.rung in rungs;
      c.hidden = !on;
      if (on) {
        shown++;
      }
    });
    var head = grid.tHead.rows[0];
    var columns = [true];
    for (var j = 1; j < head.cells.length; j++) {
      columns.push(false);
    }
    Array.prototype.forEach.call(grid.tBodies[0].rows, function (row) {
      var any = false;
      for (var j = 1; j < row.cells.length; j++) {
        if (row.cells[j].querySelector("a.cell:not([hidden])")) {
          any = true;
          columns[j] = true;
        }
      }
      // A machine nothing was observed of has no cell: it shows with its status.
      row.hidden = row.querySelector("a.cell") ? !any : !(row.dataset.status in statuses);
    });
    Array.prototype.forEach.call(grid.rows, function (row) {
      for (var j = 1; j < row.cells.length; j++) {
        row.cells[j].hidden = !columns[j];
      }
    });
    document.getElementById("shown").textContent = "showing " + shown + " of " + cells.length + " results";
  }

  document.getElementById("filters").addEventListener("change", apply);
  apply();
  if (location.hash.length > 1 && document.getElementById(location.hash.slice(1))) {
    open(location.hash.slice(1));
  }
})();
