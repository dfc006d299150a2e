"""The names of the storage face that hold psycopg's types, in a module of their own so
that importing the face does not import the driver (issue 31: ``companyd validate`` of a
SQLite company). Binding one of them imports psycopg.
"""

from __future__ import annotations

import sqlite3

import psycopg

from companyd._sqlite import Database
from companyd.storage._postgres import PgDatabase

__all__ = ["DB_ERRORS", "StoreDatabase"]

#: What a store's database raises for a failing database, file or connection.
DB_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error, psycopg.Error, OSError)

#: Either backend's database, as a store holds it.
StoreDatabase = Database | PgDatabase
