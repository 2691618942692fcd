"""The databases of `sql-synth`: domain templates (tables, columns, foreign keys), the small
word lists their rows are drawn from, and `build`, which instantiates a domain as a SQLite
file. Adding a domain is adding an entry to `DOMAINS`.

A column's `kind` says how questions may use it:
- `pk`, `fk`: keys (an fk names the table it references);
- `name`: what identifies a row to a person; unique within its table, so questions can say
  "the name of ..." and GROUP BY a name means the same as GROUP BY the key;
- `cat`: a low-cardinality value questions filter and group on (`city`, `genre`, `year`);
- `int`, `money`: numbers questions compare, sort and aggregate (money has two decimals);
- `date`: ISO `YYYY-MM-DD` text.
`gen` says how values are drawn: ("person",), ("title", first_words, second_words),
("choice", values), ("int", lo, hi), ("money", lo, hi), ("date", first_year, last_year).
"""

from __future__ import annotations

import datetime as dt
import os
import random
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyhub.errors import UsageError


@dataclass(frozen=True)
class Col:
    name: str
    type: str  # SQLite type in the DDL: INTEGER, TEXT, REAL
    kind: str
    gen: tuple[Any, ...] = ()
    ref: str = ""  # for kind "fk": the referenced table (its key is its first column)

    @property
    def label(self) -> str:
        """How a question names the column: its name with spaces, so the mapping is plain."""
        return self.name.replace("_", " ")


@dataclass(frozen=True)
class Table:
    name: str
    singular: str
    plural: str
    rows: tuple[int, int]  # how many rows a generated database has: (min, max)
    cols: tuple[Col, ...]


FIRST = ("Ada", "Alan", "Amara", "Ben", "Carla", "Chen", "Diego", "Elena", "Farah", "Felix",
         "Grace", "Hana", "Ivan", "Jonas", "Kofi", "Lena", "Liam", "Maya", "Mei", "Nadia",
         "Noah", "Olga", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Sofia", "Tariq", "Uma",
         "Victor", "Wen", "Yara", "Yusuf", "Zoe", "Marco", "Ines", "Kenji", "Leila", "Pavel")
LAST = ("Abe", "Baker", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Haddad", "Ito",
        "Jensen", "Khan", "Lopez", "Moreau", "Novak", "Okafor", "Park", "Quist", "Rossi",
        "Silva", "Tanaka", "Usman", "Varga", "Weber", "Xu", "Yilmaz", "Zhang", "Kowalski",
        "Nguyen", "Petrov", "Santos", "Murphy", "Larsen", "Mendes", "Horvat", "Reyes", "Cho")
CITIES = ("Lisbon", "Osaka", "Nairobi", "Toronto", "Lyon", "Austin", "Krakow", "Seoul",
          "Porto", "Denver", "Cairo", "Oslo", "Lima", "Dublin")
COUNTRIES = ("Japan", "Brazil", "Canada", "France", "Nigeria", "Sweden", "India", "Mexico",
             "Italy", "Korea", "Kenya", "Spain")
ADJ = ("Silent", "Golden", "Hidden", "Broken", "Crimson", "Distant", "Electric", "Frozen",
       "Gentle", "Hollow", "Iron", "Lucky", "Midnight", "Northern", "Paper", "Quiet", "Rapid",
       "Secret", "Velvet", "Wild", "Bright", "Cosmic", "Lonely", "Ancient", "Blue", "Last")
NOUN = ("River", "Garden", "Engine", "Harbor", "Lantern", "Mirror", "Orchard", "Signal",
        "Tower", "Voyage", "Winter", "Compass", "Forest", "Island", "Letter", "Machine",
        "Ocean", "Planet", "Road", "Shadow", "Storm", "Thread", "Valley", "Window", "Echo")
ITEM = ("Lamp", "Kettle", "Backpack", "Notebook", "Headphones", "Blender", "Jacket", "Mug",
        "Speaker", "Chair", "Desk", "Camera", "Umbrella", "Watch", "Pillow", "Scarf")
SUBJECT = ("Algebra", "Biology", "Chemistry", "Databases", "Economics", "Ethics", "Geology",
           "History", "Linguistics", "Logic", "Music Theory", "Optics", "Poetry", "Statistics",
           "Robotics", "Sculpture", "Thermodynamics", "Topology", "Zoology", "Astronomy")
LEVEL = ("Intro to", "Advanced", "Applied", "Modern", "Topics in")
DEPARTMENTS = ("Engineering", "Sales", "Marketing", "Finance", "Legal", "Research", "Support",
               "Operations", "Design", "Security", "Logistics", "Training")

DOMAINS: dict[str, tuple[Table, ...]] = {
    "shop": (
        Table("customers", "customer", "customers", (40, 120), (
            Col("customer_id", "INTEGER", "pk"),
            Col("name", "TEXT", "name", ("person",)),
            Col("city", "TEXT", "cat", ("choice", CITIES)),
            Col("signup_date", "TEXT", "date", ("date", 2016, 2024)))),
        Table("products", "product", "products", (20, 60), (
            Col("product_id", "INTEGER", "pk"),
            Col("name", "TEXT", "name", ("title", ADJ, ITEM)),
            Col("category", "TEXT", "cat", ("choice", ("Home", "Outdoor", "Office", "Kitchen",
                                                       "Audio", "Apparel"))),
            Col("price", "REAL", "money", ("money", 3, 400)),
            Col("stock", "INTEGER", "int", ("int", 0, 500)))),
        Table("orders", "order", "orders", (100, 300), (
            Col("order_id", "INTEGER", "pk"),
            Col("customer_id", "INTEGER", "fk", ref="customers"),
            Col("product_id", "INTEGER", "fk", ref="products"),
            Col("quantity", "INTEGER", "int", ("int", 1, 12)),
            Col("order_date", "TEXT", "date", ("date", 2019, 2024)),
            Col("status", "TEXT", "cat", ("choice", ("pending", "shipped", "delivered",
                                                     "returned"))))),
    ),
    "school": (
        Table("students", "student", "students", (40, 150), (
            Col("student_id", "INTEGER", "pk"),
            Col("name", "TEXT", "name", ("person",)),
            Col("major", "TEXT", "cat", ("choice", ("Physics", "History", "Biology", "Art",
                                                    "Economics", "Computer Science"))),
            Col("home_city", "TEXT", "cat", ("choice", CITIES)),
            Col("gpa", "REAL", "money", ("money", 1, 4)))),
        Table("courses", "course", "courses", (15, 40), (
            Col("course_id", "INTEGER", "pk"),
            Col("title", "TEXT", "name", ("title", LEVEL, SUBJECT)),
            Col("department", "TEXT", "cat", ("choice", ("Science", "Humanities", "Arts",
                                                         "Mathematics"))),
            Col("credits", "INTEGER", "int", ("int", 1, 6)))),
        Table("enrollments", "enrollment", "enrollments", (120, 350), (
            Col("enrollment_id", "INTEGER", "pk"),
            Col("student_id", "INTEGER", "fk", ref="students"),
            Col("course_id", "INTEGER", "fk", ref="courses"),
            Col("term", "TEXT", "cat", ("choice", ("Fall 2022", "Spring 2023", "Fall 2023",
                                                   "Spring 2024"))),
            Col("score", "INTEGER", "int", ("int", 35, 100)))),
    ),
    "library": (
        Table("authors", "author", "authors", (20, 60), (
            Col("author_id", "INTEGER", "pk"),
            Col("name", "TEXT", "name", ("person",)),
            Col("country", "TEXT", "cat", ("choice", COUNTRIES)),
            Col("birth_year", "INTEGER", "int", ("int", 1930, 1995)))),
        Table("books", "book", "books", (50, 150), (
            Col("book_id", "INTEGER", "pk"),
            Col("title", "TEXT", "name", ("title", ADJ, NOUN)),
            Col("author_id", "INTEGER", "fk", ref="authors"),
            Col("genre", "TEXT", "cat", ("choice", ("Mystery", "Fantasy", "Poetry", "Science",
                                                    "Romance", "Biography"))),
            Col("pages", "INTEGER", "int", ("int", 90, 900)))),
        Table("members", "member", "members", (30, 100), (
            Col("member_id", "INTEGER", "pk"),
            Col("name", "TEXT", "name", ("person",)),
            Col("city", "TEXT", "cat", ("choice", CITIES)),
            Col("joined_date", "TEXT", "date", ("date", 2012, 2024)))),
        Table("loans", "loan", "loans", (100, 300), (
            Col("loan_id", "INTEGER", "pk"),
            Col("book_id", "INTEGER", "fk", ref="books"),
            Col("member_id", "INTEGER", "fk", ref="members"),
            Col("loan_date", "TEXT", "date", ("date", 2020, 2024)),
            Col("days_kept", "INTEGER", "int", ("int", 1, 60)))),
    ),
    "hr": (
        Table("departments", "department", "departments", (6, 12), (
            Col("department_id", "INTEGER", "pk"),
            Col("name", "TEXT", "name", ("choice", DEPARTMENTS)),
            Col("location", "TEXT", "cat", ("choice", CITIES[:5])),
            Col("budget", "REAL", "money", ("money", 50_000, 2_000_000)))),
        Table("employees", "employee", "employees", (40, 150), (
            Col("employee_id", "INTEGER", "pk"),
            Col("name", "TEXT", "name", ("person",)),
            Col("department_id", "INTEGER", "fk", ref="departments"),
            Col("job_title", "TEXT", "cat", ("choice", ("Engineer", "Analyst", "Manager",
                                                        "Assistant", "Director"))),
            Col("hire_date", "TEXT", "date", ("date", 2005, 2024)),
            Col("vacation_days", "INTEGER", "int", ("int", 10, 35)))),
        Table("salaries", "salary record", "salary records", (100, 300), (
            Col("salary_id", "INTEGER", "pk"),
            Col("employee_id", "INTEGER", "fk", ref="employees"),
            Col("year", "INTEGER", "cat", ("choice", (2020, 2021, 2022, 2023, 2024))),
            Col("amount", "REAL", "money", ("money", 30_000, 180_000)))),
    ),
    "music": (
        Table("artists", "artist", "artists", (15, 50), (
            Col("artist_id", "INTEGER", "pk"),
            Col("name", "TEXT", "name", ("person",)),
            Col("country", "TEXT", "cat", ("choice", COUNTRIES)),
            Col("formed_year", "INTEGER", "int", ("int", 1960, 2020)))),
        Table("albums", "album", "albums", (30, 100), (
            Col("album_id", "INTEGER", "pk"),
            Col("title", "TEXT", "name", ("title", ADJ, NOUN)),
            Col("artist_id", "INTEGER", "fk", ref="artists"),
            Col("genre", "TEXT", "cat", ("choice", ("Rock", "Jazz", "Pop", "Folk",
                                                    "Electronic", "Classical"))),
            Col("release_date", "TEXT", "date", ("date", 1975, 2024)),
            Col("price", "REAL", "money", ("money", 5, 40)))),
        Table("tracks", "track", "tracks", (100, 300), (
            Col("track_id", "INTEGER", "pk"),
            Col("title", "TEXT", "name", ("title", ADJ, NOUN)),
            Col("album_id", "INTEGER", "fk", ref="albums"),
            Col("duration_seconds", "INTEGER", "int", ("int", 90, 600)),
            Col("plays", "INTEGER", "int", ("int", 0, 100_000)))),
    ),
}


# ---------------------------------------------------------------------------- instances
#: changes whenever what a seed generates changes, so stale cached files are never reused
VERSION = 1


def database_ids(seed: int, n_databases: int) -> list[str]:
    """`<domain>_<seed>_<index>`; the domains take turns (in a seeded order), so any five
    consecutive databases cover them all."""
    order = sorted(DOMAINS)
    random.Random(f"synth-domains:{seed}").shuffle(order)
    return [f"{order[j % len(order)]}_{seed}_{j}" for j in range(n_databases)]


def ensure_database(root: Path, db_id: str) -> Path:
    """The SQLite file of `db_id` under `root`, generated first if it is not there yet."""
    domain, seed, index = db_id.rsplit("_", 2)
    if domain not in DOMAINS or not (seed.lstrip("-").isdigit() and index.isdigit()):
        raise UsageError(f"{db_id!r} is not a sql-synth database id (<domain>_<seed>_<index>, "
                         f"domain one of {sorted(DOMAINS)})")
    path = root / f"{db_id}.v{VERSION}.sqlite"
    if not path.is_file():
        build(DOMAINS[domain], random.Random(f"synth-db:v{VERSION}:{db_id}"), path)
    return path


def build(tables: tuple[Table, ...], rng: random.Random, path: Path) -> None:
    """Write a SQLite database with `tables` filled with rows drawn from `rng` to `path`.

    Built under a temporary name and renamed into place: a reader (or a concurrent builder of
    the same, identical file) never sees half a database."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    try:
        sizes: dict[str, int] = {}
        for t in tables:
            con.execute(ddl(t))
            n = rng.randint(*t.rows)
            columns = [_column(c, n, rng, sizes) for c in t.cols]
            n = sizes[t.name] = min(len(col) for col in columns)  # a small name pool caps it
            con.executemany(f"INSERT INTO {t.name} VALUES ({', '.join('?' * len(t.cols))})",
                            [tuple(col[i] for col in columns) for i in range(n)])
        con.commit()
    finally:
        con.close()
    os.replace(tmp, path)


def ddl(t: Table) -> str:
    """CREATE TABLE with types, keys and foreign keys: the env shows it as the schema."""
    lines = []
    for c in t.cols:
        extra = " PRIMARY KEY" if c.kind == "pk" else " NOT NULL UNIQUE" if c.kind == "name" \
            else " NOT NULL"
        lines.append(f"    {c.name} {c.type}{extra}")
    lines += [f"    FOREIGN KEY ({c.name}) REFERENCES {c.ref} ({c.name})"
              for c in t.cols if c.kind == "fk"]
    return f"CREATE TABLE {t.name} (\n" + ",\n".join(lines) + "\n)"


def _column(c: Col, n: int, rng: random.Random, sizes: dict[str, int]) -> list[object]:
    if c.kind == "pk":
        return list(range(1, n + 1))
    if c.kind == "fk":
        # some parents get no rows (for "have no ..." questions), the others a skewed share
        keys = list(range(1, sizes[c.ref] + 1))
        rng.shuffle(keys)
        keys = keys[:max(1, round(len(keys) * 0.85))]
        return rng.choices(keys, weights=[1 / (r + 1) ** 0.6 for r in range(len(keys))], k=n)
    kind, *args = c.gen
    if c.kind == "name":  # unique: sampled without replacement from every combination
        pool = [f"{a} {b}" for a in FIRST for b in LAST] if kind == "person" else \
            [f"{a} {b}" for a in args[0] for b in args[1]] if kind == "title" else list(args[0])
        return rng.sample(pool, min(n, len(pool)))
    if kind == "choice":
        return [rng.choice(args[0]) for _ in range(n)]
    if kind == "int":
        return [rng.randint(*args) for _ in range(n)]
    if kind == "money":
        return [round(rng.uniform(*args), 2) for _ in range(n)]
    if kind == "date":
        lo, hi = dt.date(args[0], 1, 1).toordinal(), dt.date(args[1], 12, 31).toordinal()
        return [dt.date.fromordinal(rng.randint(lo, hi)).isoformat() for _ in range(n)]
    raise ValueError(f"unknown generator {c.gen!r} for column {c.name}")
