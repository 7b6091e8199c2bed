"""Real schemas, used as their applications use them: the downstream ends as a replica's.

Sakila (MySQL's sample schema as shipped: spatial and full-text keys, triggers that keep a
second table, ENUM/SET/YEAR, cascading keys, views, stored functions and procedures, an
application's transactions in row, statement and mixed format) and an HR schema shaped like
the Employees sample (composite keys over dates, ranges of history rows), each taken through
the relay and ``sync --until-caught-up``, then compared table by table.
"""

from __future__ import annotations

from pathlib import Path

from fidelity import Env, assert_converged, make_env, sync_with_crashes

SAKILA = [
    "CREATE DATABASE sakila DEFAULT CHARACTER SET utf8mb4",
    "USE sakila",
    """CREATE TABLE actor (
      actor_id SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT,
      first_name VARCHAR(45) NOT NULL,
      last_name VARCHAR(45) NOT NULL,
      last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
      PRIMARY KEY (actor_id),
      KEY idx_actor_last_name (last_name)
    ) ENGINE=InnoDB""",
    """CREATE TABLE country (
      country_id SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT,
      country VARCHAR(50) NOT NULL,
      last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
      PRIMARY KEY (country_id)
    ) ENGINE=InnoDB""",
    """CREATE TABLE city (
      city_id SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT,
      city VARCHAR(50) NOT NULL,
      country_id SMALLINT UNSIGNED NOT NULL,
      last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
      PRIMARY KEY (city_id),
      KEY idx_fk_country_id (country_id),
      CONSTRAINT fk_city_country FOREIGN KEY (country_id) REFERENCES country (country_id)
        ON DELETE RESTRICT ON UPDATE CASCADE
    ) ENGINE=InnoDB""",
    """CREATE TABLE address (
      address_id SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT,
      address VARCHAR(50) NOT NULL,
      address2 VARCHAR(50) DEFAULT NULL,
      district VARCHAR(20) NOT NULL,
      city_id SMALLINT UNSIGNED NOT NULL,
      postal_code VARCHAR(10) DEFAULT NULL,
      phone VARCHAR(20) NOT NULL,
      location GEOMETRY NOT NULL,
      last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
      PRIMARY KEY (address_id),
      KEY idx_fk_city_id (city_id),
      SPATIAL KEY idx_location (location),
      CONSTRAINT fk_address_city FOREIGN KEY (city_id) REFERENCES city (city_id)
        ON DELETE RESTRICT ON UPDATE CASCADE
    ) ENGINE=InnoDB""",
    """CREATE TABLE category (
      category_id TINYINT UNSIGNED NOT NULL AUTO_INCREMENT,
      name VARCHAR(25) NOT NULL,
      last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
      PRIMARY KEY (category_id)
    ) ENGINE=InnoDB""",
    """CREATE TABLE language (
      language_id TINYINT UNSIGNED NOT NULL AUTO_INCREMENT,
      name CHAR(20) NOT NULL,
      last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
      PRIMARY KEY (language_id)
    ) ENGINE=InnoDB""",
    """CREATE TABLE film (
      film_id SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT,
      title VARCHAR(128) NOT NULL,
      description TEXT DEFAULT NULL,
      release_year YEAR DEFAULT NULL,
      language_id TINYINT UNSIGNED NOT NULL,
      original_language_id TINYINT UNSIGNED DEFAULT NULL,
      rental_duration TINYINT UNSIGNED NOT NULL DEFAULT 3,
      rental_rate DECIMAL(4,2) NOT NULL DEFAULT 4.99,
      length SMALLINT UNSIGNED DEFAULT NULL,
      replacement_cost DECIMAL(5,2) NOT NULL DEFAULT 19.99,
      rating ENUM('G','PG','PG-13','R','NC-17') DEFAULT 'G',
      special_features SET('Trailers','Commentaries','Deleted Scenes','Behind the Scenes')
        DEFAULT NULL,
      last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
      PRIMARY KEY (film_id),
      KEY idx_title (title),
      KEY idx_fk_language_id (language_id),
      KEY idx_fk_original_language_id (original_language_id),
      CONSTRAINT fk_film_language FOREIGN KEY (language_id) REFERENCES language (language_id)
        ON DELETE RESTRICT ON UPDATE CASCADE,
      CONSTRAINT fk_film_language_original FOREIGN KEY (original_language_id)
        REFERENCES language (language_id) ON DELETE RESTRICT ON UPDATE CASCADE
    ) ENGINE=InnoDB""",
    """CREATE TABLE film_actor (
      actor_id SMALLINT UNSIGNED NOT NULL,
      film_id SMALLINT UNSIGNED NOT NULL,
      last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
      PRIMARY KEY (actor_id, film_id),
      KEY idx_fk_film_id (film_id),
      CONSTRAINT fk_film_actor_actor FOREIGN KEY (actor_id) REFERENCES actor (actor_id)
        ON DELETE RESTRICT ON UPDATE CASCADE,
      CONSTRAINT fk_film_actor_film FOREIGN KEY (film_id) REFERENCES film (film_id)
        ON DELETE RESTRICT ON UPDATE CASCADE
    ) ENGINE=InnoDB""",
    """CREATE TABLE film_category (
      film_id SMALLINT UNSIGNED NOT NULL,
      category_id TINYINT UNSIGNED NOT NULL,
      last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
      PRIMARY KEY (film_id, category_id),
      CONSTRAINT fk_film_category_film FOREIGN KEY (film_id) REFERENCES film (film_id)
        ON DELETE RESTRICT ON UPDATE CASCADE,
      CONSTRAINT fk_film_category_category FOREIGN KEY (category_id)
        REFERENCES category (category_id) ON DELETE RESTRICT ON UPDATE CASCADE
    ) ENGINE=InnoDB""",
    # MyISAM as in the schema as shipped (its FULLTEXT key predates InnoDB's).
    """CREATE TABLE film_text (
      film_id SMALLINT NOT NULL,
      title VARCHAR(255) NOT NULL,
      description TEXT,
      PRIMARY KEY (film_id),
      FULLTEXT KEY idx_title_description (title, description)
    ) ENGINE=MyISAM""",
    """CREATE TABLE staff (
      staff_id TINYINT UNSIGNED NOT NULL AUTO_INCREMENT,
      first_name VARCHAR(45) NOT NULL,
      last_name VARCHAR(45) NOT NULL,
      address_id SMALLINT UNSIGNED NOT NULL,
      picture BLOB DEFAULT NULL,
      email VARCHAR(50) DEFAULT NULL,
      store_id TINYINT UNSIGNED NOT NULL,
      active BOOLEAN NOT NULL DEFAULT TRUE,
      username VARCHAR(16) NOT NULL,
      password VARCHAR(40) BINARY DEFAULT NULL,
      last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
      PRIMARY KEY (staff_id),
      KEY idx_fk_store_id (store_id),
      KEY idx_fk_address_id (address_id),
      CONSTRAINT fk_staff_address FOREIGN KEY (address_id) REFERENCES address (address_id)
        ON DELETE RESTRICT ON UPDATE CASCADE
    ) ENGINE=InnoDB""",
    """CREATE TABLE store (
      store_id TINYINT UNSIGNED NOT NULL AUTO_INCREMENT,
      manager_staff_id TINYINT UNSIGNED NOT NULL,
      address_id SMALLINT UNSIGNED NOT NULL,
      last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
      PRIMARY KEY (store_id),
      UNIQUE KEY idx_unique_manager (manager_staff_id),
      KEY idx_fk_address_id (address_id),
      CONSTRAINT fk_store_staff FOREIGN KEY (manager_staff_id) REFERENCES staff (staff_id)
        ON DELETE RESTRICT ON UPDATE CASCADE,
      CONSTRAINT fk_store_address FOREIGN KEY (address_id) REFERENCES address (address_id)
        ON DELETE RESTRICT ON UPDATE CASCADE
    ) ENGINE=InnoDB""",
    """CREATE TABLE customer (
      customer_id SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT,
      store_id TINYINT UNSIGNED NOT NULL,
      first_name VARCHAR(45) NOT NULL,
      last_name VARCHAR(45) NOT NULL,
      email VARCHAR(50) DEFAULT NULL,
      address_id SMALLINT UNSIGNED NOT NULL,
      active BOOLEAN NOT NULL DEFAULT TRUE,
      create_date DATETIME NOT NULL,
      last_update TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
      PRIMARY KEY (customer_id),
      KEY idx_fk_store_id (store_id),
      KEY idx_fk_address_id (address_id),
      KEY idx_last_name (last_name),
      CONSTRAINT fk_customer_address FOREIGN KEY (address_id) REFERENCES address (address_id)
        ON DELETE RESTRICT ON UPDATE CASCADE,
      CONSTRAINT fk_customer_store FOREIGN KEY (store_id) REFERENCES store (store_id)
        ON DELETE RESTRICT ON UPDATE CASCADE
    ) ENGINE=InnoDB""",
    """CREATE TABLE inventory (
      inventory_id MEDIUMINT UNSIGNED NOT NULL AUTO_INCREMENT,
      film_id SMALLINT UNSIGNED NOT NULL,
      store_id TINYINT UNSIGNED NOT NULL,
      last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
      PRIMARY KEY (inventory_id),
      KEY idx_fk_film_id (film_id),
      KEY idx_store_id_film_id (store_id, film_id),
      CONSTRAINT fk_inventory_store FOREIGN KEY (store_id) REFERENCES store (store_id)
        ON DELETE RESTRICT ON UPDATE CASCADE,
      CONSTRAINT fk_inventory_film FOREIGN KEY (film_id) REFERENCES film (film_id)
        ON DELETE RESTRICT ON UPDATE CASCADE
    ) ENGINE=InnoDB""",
    """CREATE TABLE rental (
      rental_id INT NOT NULL AUTO_INCREMENT,
      rental_date DATETIME NOT NULL,
      inventory_id MEDIUMINT UNSIGNED NOT NULL,
      customer_id SMALLINT UNSIGNED NOT NULL,
      return_date DATETIME DEFAULT NULL,
      staff_id TINYINT UNSIGNED NOT NULL,
      last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
      PRIMARY KEY (rental_id),
      UNIQUE KEY (rental_date, inventory_id, customer_id),
      KEY idx_fk_inventory_id (inventory_id),
      KEY idx_fk_customer_id (customer_id),
      KEY idx_fk_staff_id (staff_id),
      CONSTRAINT fk_rental_staff FOREIGN KEY (staff_id) REFERENCES staff (staff_id)
        ON DELETE RESTRICT ON UPDATE CASCADE,
      CONSTRAINT fk_rental_inventory FOREIGN KEY (inventory_id)
        REFERENCES inventory (inventory_id) ON DELETE RESTRICT ON UPDATE CASCADE,
      CONSTRAINT fk_rental_customer FOREIGN KEY (customer_id)
        REFERENCES customer (customer_id) ON DELETE RESTRICT ON UPDATE CASCADE
    ) ENGINE=InnoDB""",
    """CREATE TABLE payment (
      payment_id SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT,
      customer_id SMALLINT UNSIGNED NOT NULL,
      staff_id TINYINT UNSIGNED NOT NULL,
      rental_id INT DEFAULT NULL,
      amount DECIMAL(5,2) NOT NULL,
      payment_date DATETIME NOT NULL,
      last_update TIMESTAMP DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
      PRIMARY KEY (payment_id),
      KEY idx_fk_staff_id (staff_id),
      KEY idx_fk_customer_id (customer_id),
      CONSTRAINT fk_payment_rental FOREIGN KEY (rental_id) REFERENCES rental (rental_id)
        ON DELETE SET NULL ON UPDATE CASCADE,
      CONSTRAINT fk_payment_customer FOREIGN KEY (customer_id)
        REFERENCES customer (customer_id) ON DELETE RESTRICT ON UPDATE CASCADE,
      CONSTRAINT fk_payment_staff FOREIGN KEY (staff_id) REFERENCES staff (staff_id)
        ON DELETE RESTRICT ON UPDATE CASCADE
    ) ENGINE=InnoDB""",
    # The schema's triggers: film_text follows film; a customer's create_date is set on insert.
    """CREATE TRIGGER ins_film AFTER INSERT ON film FOR EACH ROW BEGIN
        INSERT INTO film_text (film_id, title, description)
            VALUES (new.film_id, new.title, new.description);
      END""",
    """CREATE TRIGGER upd_film AFTER UPDATE ON film FOR EACH ROW BEGIN
        IF (old.title != new.title) OR (old.description != new.description)
           OR (old.film_id != new.film_id) THEN
            UPDATE film_text SET title = new.title, description = new.description,
                film_id = new.film_id WHERE film_id = old.film_id;
        END IF;
      END""",
    """CREATE TRIGGER del_film AFTER DELETE ON film FOR EACH ROW BEGIN
        DELETE FROM film_text WHERE film_id = old.film_id;
      END""",
    "CREATE TRIGGER customer_create_date BEFORE INSERT ON customer"
    " FOR EACH ROW SET NEW.create_date = NOW()",
    """CREATE TRIGGER payment_date BEFORE INSERT ON payment
       FOR EACH ROW SET NEW.payment_date = NOW()""",
    """CREATE TRIGGER rental_date BEFORE INSERT ON rental
       FOR EACH ROW SET NEW.rental_date = NOW()""",
    """CREATE VIEW customer_list AS
       SELECT cu.customer_id AS ID, CONCAT(cu.first_name, ' ', cu.last_name) AS name,
              a.address, a.postal_code AS `zip code`, a.phone, city.city, country.country,
              IF(cu.active, 'active', '') AS notes, cu.store_id AS SID
       FROM customer AS cu JOIN address AS a ON cu.address_id = a.address_id
       JOIN city ON a.city_id = city.city_id
       JOIN country ON city.country_id = country.country_id""",
    """CREATE FUNCTION inventory_in_stock(p_inventory_id INT) RETURNS BOOLEAN
       READS SQL DATA
       BEGIN
         DECLARE v_rentals INT;
         DECLARE v_out INT;
         SELECT COUNT(*) INTO v_rentals FROM rental WHERE inventory_id = p_inventory_id;
         IF v_rentals = 0 THEN RETURN TRUE; END IF;
         SELECT COUNT(rental_id) INTO v_out FROM inventory LEFT JOIN rental USING (inventory_id)
           WHERE inventory.inventory_id = p_inventory_id AND rental.return_date IS NULL;
         IF v_out > 0 THEN RETURN FALSE; ELSE RETURN TRUE; END IF;
       END""",
    # rewards_report as shipped: a temporary table inside a procedure, then a SELECT of it.
    """CREATE PROCEDURE rewards_report(IN min_monthly_purchases TINYINT UNSIGNED,
                                       IN min_dollar_amount_purchased DECIMAL(10,2),
                                       OUT count_rewardees INT)
       READS SQL DATA
       proc: BEGIN
         DECLARE last_month_start DATE;
         DECLARE last_month_end DATE;
         SET last_month_start = DATE_SUB(CURRENT_DATE(), INTERVAL 1 MONTH);
         SET last_month_start = STR_TO_DATE(CONCAT(YEAR(last_month_start), '-',
                                MONTH(last_month_start), '-01'), '%Y-%m-%d');
         SET last_month_end = LAST_DAY(last_month_start);
         CREATE TEMPORARY TABLE tmpCustomer (customer_id SMALLINT UNSIGNED NOT NULL PRIMARY KEY);
         INSERT INTO tmpCustomer (customer_id)
           SELECT p.customer_id FROM payment AS p
           WHERE DATE(p.payment_date) >= last_month_start
           GROUP BY customer_id
           HAVING SUM(p.amount) > min_dollar_amount_purchased
              AND COUNT(customer_id) > min_monthly_purchases;
         SELECT COUNT(*) FROM tmpCustomer INTO count_rewardees;
         DROP TABLE tmpCustomer;
       END""",
    # An application's write path in a procedure: what it changes is logged as rows.
    """CREATE PROCEDURE rent(IN p_inventory_id INT, IN p_customer_id INT, IN p_staff_id INT)
       MODIFIES SQL DATA
       BEGIN
         INSERT INTO rental (rental_date, inventory_id, customer_id, staff_id)
           VALUES (NOW(), p_inventory_id, p_customer_id, p_staff_id);
         INSERT INTO payment (customer_id, staff_id, rental_id, amount, payment_date)
           SELECT p_customer_id, p_staff_id, LAST_INSERT_ID(), f.rental_rate, NOW()
           FROM inventory AS i JOIN film AS f USING (film_id)
           WHERE i.inventory_id = p_inventory_id;
       END""",
]

SAKILA_DATA = [
    "USE sakila",
    "INSERT INTO language (name) VALUES ('English'), ('Italian'), ('Japanese'), ('Mandarin'),"
    " ('French'), ('German')",
    "INSERT INTO country (country) VALUES ('Afghanistan'), ('Algeria'), ('Côte d’Ivoire'),"
    " ('Réunion'), ('Japan')",
    "INSERT INTO city (city, country_id) VALUES ('Kabul', 1), ('Batna', 2), ('Abidjan', 3),"
    " ('Saint-Denis', 4), ('Tōkyō', 5), ('Ōsaka', 5)",
    "INSERT INTO address (address, district, city_id, postal_code, phone, location) VALUES"
    " ('47 MySakila Drive', 'Alberta', 1, '', '', ST_GeomFromText('POINT(-112.8185 49.6342)')),"
    " ('28 MySQL Boulevard', 'QLD', 2, '', '', ST_GeomFromText('POINT(153.1408 -27.6033)')),"
    " ('23 Workhaven Lane', 'Alberta', 3, '', '14033335568',"
    "  ST_GeomFromText('POINT(-112.8185 49.6342)')),"
    " ('1411 Lillydale Drive', 'QLD', 4, '', '6172235589',"
    "  ST_GeomFromText('POLYGON((0 0,10 0,10 10,0 10,0 0),(2 2,3 2,3 3,2 2))')),"
    " ('1913 Hanoi Way', 'Nagasaki', 5, '35200', '28303384290',"
    "  ST_GeomFromText('LINESTRING(129.87 32.75,130.1 33.2)')),"
    " ('1121 Loja Avenue', 'California', 6, '17886', '838635286649',"
    "  ST_GeomFromText('MULTIPOINT(1 1,2 2,3 3)'))",
    "SET FOREIGN_KEY_CHECKS = 0",
    "INSERT INTO staff (first_name, last_name, address_id, picture, email, store_id, username,"
    " password) VALUES ('Mike', 'Hillyer', 3, UNHEX('89504E470D0A1A0A0000000D49484452'),"
    " 'Mike.Hillyer@sakilastaff.com', 1, 'Mike', '8cb2237d0679ca88db6464eac60da96345513964'),"
    " ('Jon', 'Stephens', 4, NULL, 'Jon.Stephens@sakilastaff.com', 2, 'Jon',"
    " '8cb2237d0679ca88db6464eac60da96345513964')",
    "INSERT INTO store (manager_staff_id, address_id) VALUES (1, 1), (2, 2)",
    "SET FOREIGN_KEY_CHECKS = 1",
    "INSERT INTO category (name) VALUES ('Action'), ('Animation'), ('Children'), ('Classics'),"
    " ('Comedy'), ('Documentary'), ('Drama')",
    "INSERT INTO actor (first_name, last_name) SELECT CONCAT('FIRST', seq),"
    " CONCAT('LAST', seq % 37) FROM seq_1_to_200",
    "INSERT INTO film (title, description, release_year, language_id, original_language_id,"
    " rental_duration, rental_rate, length, replacement_cost, rating, special_features)"
    " SELECT CONCAT('FILM ', seq), CONCAT('A Epic Drama of a Feminist And a Mad Scientist #',"
    " seq), 2006 - seq % 10, 1 + seq % 6, IF(seq % 3 = 0, NULL, 1 + seq % 5), 3 + seq % 5,"
    " ELT(1 + seq % 3, 0.99, 2.99, 4.99), 46 + seq % 140, 9.99 + seq % 21,"
    " ELT(1 + seq % 5, 'G', 'PG', 'PG-13', 'R', 'NC-17'),"
    " ELT(1 + seq % 4, 'Trailers', 'Commentaries,Deleted Scenes',"
    " 'Deleted Scenes,Behind the Scenes', NULL) FROM seq_1_to_300",
    "INSERT INTO film_actor (actor_id, film_id)"
    " SELECT 1 + (seq * 7) % 200, 1 + seq % 300 FROM seq_1_to_900 ON DUPLICATE KEY UPDATE"
    " last_update = last_update",
    "INSERT INTO film_category (film_id, category_id) SELECT seq, 1 + seq % 7 FROM seq_1_to_300",
    "INSERT INTO inventory (film_id, store_id) SELECT 1 + seq % 300, 1 + seq % 2"
    " FROM seq_1_to_1200",
    "INSERT INTO customer (store_id, first_name, last_name, email, address_id, active,"
    " create_date) SELECT 1 + seq % 2, CONCAT('MARY', seq), CONCAT('SMITH', seq % 50),"
    " CONCAT('mary', seq, '@sakilacustomer.org'), 1 + seq % 6, seq % 11 <> 0, '2006-02-14'"
    " FROM seq_1_to_300",
]


def _workload(*, myisam_statements: bool = True) -> list:
    """What a rental store's application does during a day: rentals through the
    procedure, returns, payments, a late fee in statement format, a mixed-format session,
    catalogue edits that fire film_text's triggers, schema changes in between."""
    steps: list = ["USE sakila", (1, "USE sakila"), (2, "USE sakila"), (3, "USE sakila")]
    steps += [(1, "SET SESSION binlog_format = 'STATEMENT'"),
              (2, "SET SESSION binlog_format = 'MIXED'")]
    for i in range(1, 121):
        steps.append((3, f"CALL rent({i * 7 % 1200 + 1}, {i * 13 % 300 + 1}, {1 + i % 2})"))
        if i % 3 == 0:
            steps += [(0, "BEGIN"),
                      (0, f"UPDATE rental SET return_date = NOW() + INTERVAL {i % 5} DAY"
                          f" WHERE rental_id = {i - 1}"),
                      (0, f"UPDATE customer SET active = NOT active WHERE customer_id = {i}"),
                      (0, "COMMIT")]
        if i % 10 == 0:
            # Statement format: the same rows chosen by the same statement downstream.
            steps += [(1, f"UPDATE payment SET amount = amount + 1.50 WHERE rental_id IN"
                          f" (SELECT rental_id FROM rental WHERE return_date IS NOT NULL)"
                          f" AND payment_id % 10 = {i % 10}")]
            if myisam_statements:
                steps.append((1, f"INSERT INTO film_text VALUES ({1000 + i}, 'orphan', NULL)"))
        if i % 15 == 0:
            # MIXED: statements but where unsafe; none fires a trigger (an UPDATE of a table
            # whose triggers are on INSERT) or it would stop (tests/test_fidelity.py).
            steps += [(2, "BEGIN"),
                      (2, f"INSERT INTO actor (first_name, last_name) VALUES ('NEW{i}', UUID())"),
                      (2, f"UPDATE customer SET email = UPPER(email) WHERE customer_id = {i}"),
                      (2, f"UPDATE inventory SET store_id = 3 - store_id"
                          f" WHERE inventory_id % 97 = {i % 97}"),
                      (2, "COMMIT"),
                      (0, f"UPDATE film SET description = CONCAT(description, ' (rev {i})'),"
                          f" special_features = CONCAT_WS(',', special_features, 'Trailers')"
                          f" WHERE film_id BETWEEN {i} AND {i + 4}")]
        if i % 40 == 0:
            steps += [f"DELETE FROM film_actor WHERE film_id = {i}",
                      f"DELETE FROM film_category WHERE film_id = {i}",
                      f"DELETE FROM inventory WHERE film_id = {i} AND inventory_id NOT IN"
                      f" (SELECT inventory_id FROM rental)",
                      f"UPDATE film SET title = CONCAT(title, ' (withdrawn)') WHERE film_id = {i}"]
        if i == 50:
            steps += ["ALTER TABLE film ADD COLUMN fulltext_rank FLOAT DEFAULT NULL AFTER title,"
                      " ADD KEY idx_rating (rating)",
                      "ALTER TABLE payment MODIFY amount DECIMAL(6,2) NOT NULL",
                      "UPDATE film SET fulltext_rank = length / 7 WHERE film_id % 9 = 0"]
        if i == 90:
            steps += ["CREATE TABLE film_archive LIKE film",
                      "INSERT INTO film_archive SELECT * FROM film WHERE release_year < 2000",
                      "ALTER TABLE language CHANGE name name VARCHAR(20) NOT NULL",
                      "UPDATE language SET language_id = 60 WHERE language_id = 6"]
    steps += [
        "CALL rewards_report(0, 0.5, @n)",
        "SELECT @n",
        # A dump-and-load style session: checks off, rows in any order.
        (3, "SET SESSION foreign_key_checks = 0, unique_checks = 0"),
        (3, "INSERT INTO rental (rental_date, inventory_id, customer_id, staff_id)"
            " VALUES (NOW(), 5, 299, 1)"),
        (3, "SET SESSION foreign_key_checks = 1, unique_checks = 1"),
        "DELETE FROM payment WHERE amount > 5",
        "DELETE FROM rental WHERE return_date IS NOT NULL AND rental_id % 2 = 0",
    ]
    return steps


def test_sakila_as_an_application_uses_it(mariadb_factory, tmp_path: Path, spark) -> None:
    env = make_env(mariadb_factory, tmp_path)
    try:
        env.run(SAKILA + SAKILA_DATA + _workload())
        env.relay()
        env.sync(spark)
        assert_converged(env)
    finally:
        env.close_sessions()


def test_sakila_replayed_after_crashes(mariadb_factory, tmp_path: Path, spark,
                                       monkeypatch) -> None:
    env: Env = make_env(mariadb_factory, tmp_path)
    try:
        # (A statement's write to a MyISAM table cannot commit with the checkpoint: replayed
        # after a crash it runs twice, on a replica too; docs/apply.md, Limits.)
        env.run(SAKILA + SAKILA_DATA + _workload(myisam_statements=False))
        env.relay()
        assert sync_with_crashes(env, spark, monkeypatch) > 3
        assert_converged(env)
    finally:
        env.close_sessions()


EMPLOYEES = [
    "CREATE DATABASE employees",
    "USE employees",
    """CREATE TABLE employees (
      emp_no INT NOT NULL,
      birth_date DATE NOT NULL,
      first_name VARCHAR(14) NOT NULL,
      last_name VARCHAR(16) NOT NULL,
      gender ENUM('M','F') NOT NULL,
      hire_date DATE NOT NULL,
      PRIMARY KEY (emp_no)
    )""",
    """CREATE TABLE departments (
      dept_no CHAR(4) NOT NULL,
      dept_name VARCHAR(40) NOT NULL,
      PRIMARY KEY (dept_no),
      UNIQUE KEY (dept_name)
    )""",
    """CREATE TABLE dept_manager (
      emp_no INT NOT NULL,
      dept_no CHAR(4) NOT NULL,
      from_date DATE NOT NULL,
      to_date DATE NOT NULL,
      FOREIGN KEY (emp_no) REFERENCES employees (emp_no) ON DELETE CASCADE,
      FOREIGN KEY (dept_no) REFERENCES departments (dept_no) ON DELETE CASCADE,
      PRIMARY KEY (emp_no, dept_no)
    )""",
    """CREATE TABLE dept_emp (
      emp_no INT NOT NULL,
      dept_no CHAR(4) NOT NULL,
      from_date DATE NOT NULL,
      to_date DATE NOT NULL,
      FOREIGN KEY (emp_no) REFERENCES employees (emp_no) ON DELETE CASCADE,
      FOREIGN KEY (dept_no) REFERENCES departments (dept_no) ON DELETE CASCADE,
      PRIMARY KEY (emp_no, dept_no)
    )""",
    """CREATE TABLE titles (
      emp_no INT NOT NULL,
      title VARCHAR(50) NOT NULL,
      from_date DATE NOT NULL,
      to_date DATE,
      FOREIGN KEY (emp_no) REFERENCES employees (emp_no) ON DELETE CASCADE,
      PRIMARY KEY (emp_no, title, from_date)
    )""",
    """CREATE TABLE salaries (
      emp_no INT NOT NULL,
      salary INT NOT NULL,
      from_date DATE NOT NULL,
      to_date DATE NOT NULL,
      FOREIGN KEY (emp_no) REFERENCES employees (emp_no) ON DELETE CASCADE,
      PRIMARY KEY (emp_no, from_date)
    )""",
    # The partitioned variant of the sample keeps history by year, without foreign keys.
    """CREATE TABLE salaries_history (
      emp_no INT NOT NULL,
      salary INT NOT NULL,
      from_date DATE NOT NULL,
      to_date DATE NOT NULL,
      PRIMARY KEY (emp_no, from_date)
    ) PARTITION BY RANGE COLUMNS (from_date) (
      PARTITION p1990 VALUES LESS THAN ('1991-01-01'),
      PARTITION p1995 VALUES LESS THAN ('1996-01-01'),
      PARTITION p2000 VALUES LESS THAN ('2001-01-01'),
      PARTITION pmax VALUES LESS THAN (MAXVALUE))""",
    """CREATE VIEW current_dept_emp AS
       SELECT l.emp_no, dept_no, l.from_date, l.to_date FROM dept_emp d
       INNER JOIN (SELECT emp_no, MAX(from_date) AS from_date, MAX(to_date) AS to_date
                   FROM dept_emp GROUP BY emp_no) l
       ON l.emp_no = d.emp_no AND l.from_date = d.from_date AND l.to_date = d.to_date""",
    "INSERT INTO departments VALUES ('d001', 'Marketing'), ('d002', 'Finance'),"
    " ('d003', 'Human Resources'), ('d004', 'Production'), ('d005', 'Development'),"
    " ('d006', 'Quality Management'), ('d007', 'Sales'), ('d008', 'Research'),"
    " ('d009', 'Customer Service')",
    "INSERT INTO employees SELECT 10000 + seq, '1952-02-01' + INTERVAL seq % 4000 DAY,"
    " CONCAT('First', seq % 97), CONCAT('Last', seq % 211), ELT(1 + seq % 2, 'M', 'F'),"
    " '1985-01-01' + INTERVAL seq % 5000 DAY FROM seq_1_to_3000",
    "INSERT INTO dept_emp SELECT emp_no, CONCAT('d00', 1 + emp_no % 9), hire_date, '9999-01-01'"
    " FROM employees",
    "INSERT INTO dept_manager SELECT emp_no, dept_no, from_date, to_date FROM dept_emp"
    " WHERE emp_no % 300 = 0",
    "INSERT INTO titles SELECT emp_no, ELT(1 + emp_no % 4, 'Engineer', 'Senior Engineer',"
    " 'Staff', 'Senior Staff'), hire_date, '9999-01-01' FROM employees",
    "INSERT INTO salaries SELECT e.emp_no, 40000 + (e.emp_no * 37 + y.seq * 1000) % 60000,"
    " e.hire_date + INTERVAL y.seq YEAR, IF(y.seq = 4, '9999-01-01',"
    " e.hire_date + INTERVAL y.seq + 1 YEAR) FROM employees e JOIN seq_0_to_4 y",
    "INSERT INTO salaries_history SELECT * FROM salaries WHERE to_date < '9999-01-01'",
]


def _hr_workload() -> list:
    """A year of HR: raises (close the open salary row, open a new one), promotions,
    transfers, departures cascading through four tables, a department reorganised."""
    steps: list = ["USE employees", (1, "USE employees"), (2, "USE employees"),
                   (1, "SET SESSION binlog_format = 'STATEMENT'")]
    for i in range(60):
        emp = 10001 + i * 47 % 3000
        steps += [
            "BEGIN",
            f"UPDATE salaries SET to_date = '2024-03-{1 + i % 28:02d}' WHERE emp_no = {emp}"
            " AND to_date = '9999-01-01'",
            f"INSERT INTO salaries VALUES ({emp}, 99000 + {i}, '2024-03-{1 + i % 28:02d}',"
            " '9999-01-01') ON DUPLICATE KEY UPDATE salary = salary + 1",
            "COMMIT",
        ]
        if i % 4 == 0:
            steps += [(1, "BEGIN"),
                      (1, f"UPDATE titles SET to_date = CURDATE() WHERE emp_no = {emp + 1}"
                          " AND to_date = '9999-01-01'"),
                      (1, f"INSERT INTO titles VALUES ({emp + 1}, 'Technique Leader',"
                          " CURDATE(), '9999-01-01')"),
                      (1, "COMMIT")]
        if i % 6 == 0:
            steps += [(2, f"DELETE FROM employees WHERE emp_no = {emp + 2}")]
        if i % 9 == 0:
            steps += [f"UPDATE dept_emp SET dept_no = 'd00{1 + i % 9}' WHERE emp_no = {emp + 3}"]
        if i == 30:
            steps += [
                "ALTER TABLE salaries_history REORGANIZE PARTITION pmax INTO"
                " (PARTITION p2010 VALUES LESS THAN ('2011-01-01'),"
                " PARTITION pmax VALUES LESS THAN (MAXVALUE))",
                "INSERT INTO salaries_history SELECT * FROM salaries WHERE to_date BETWEEN"
                " '2024-01-01' AND '2024-12-31' ON DUPLICATE KEY UPDATE salary = VALUES(salary)",
                # A department merged into another: ON UPDATE is RESTRICT, so rows first.
                "INSERT INTO departments VALUES ('d010', 'Research & Development')",
                "UPDATE dept_emp SET dept_no = 'd010' WHERE dept_no IN ('d005', 'd008')"
                " AND emp_no % 7 <> 0",
                (1, "DELETE FROM dept_emp WHERE dept_no = 'd008'"),
                "DELETE FROM departments WHERE dept_no = 'd008'",
            ]
    steps += [
        "ALTER TABLE employees ADD COLUMN email VARCHAR(64) GENERATED ALWAYS AS"
        " (LOWER(CONCAT(first_name, '.', last_name, '@example.com'))) VIRTUAL",
        "ALTER TABLE salaries_history TRUNCATE PARTITION p1990",
        "UPDATE employees SET last_name = CONCAT(last_name, '-', emp_no % 3)"
        " WHERE emp_no % 100 = 1",
    ]
    return steps


def test_employees_as_hr_uses_it(mariadb_factory, tmp_path: Path, spark) -> None:
    env = make_env(mariadb_factory, tmp_path)
    try:
        env.run(EMPLOYEES + _hr_workload())
        env.relay()
        env.sync(spark)
        assert_converged(env)
    finally:
        env.close_sessions()
