"""Prompt builders: the actor's (``actor.py``), the ORM's (``orm.py``) and task generation's."""
