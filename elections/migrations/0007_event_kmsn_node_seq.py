from django.db import migrations, models


class Migration(migrations.Migration):
    """History rows are unique per (kmsn, node, seq): the agent also projects
    watched pools (docs/design.md §11), whose members' names repeat this pool's."""

    dependencies = [("elections", "0006_audit_keyed_chain")]

    operations = [
        migrations.RemoveConstraint(model_name="electionevent", name="event_node_seq"),
        migrations.AddConstraint(
            model_name="electionevent",
            constraint=models.UniqueConstraint(fields=("kmsn", "node", "seq"), name="event_kmsn_node_seq"),
        ),
    ]
