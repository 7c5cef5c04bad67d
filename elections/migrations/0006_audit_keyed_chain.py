from django.db import migrations, models


class Migration(migrations.Migration):
    """The audit chain is keyed (HMAC with POOL_KEY); rows written before stay
    verifiable as unkeyed "sha256" rows, but only as the chain's beginning."""

    dependencies = [("elections", "0005_audit_event_kind")]

    operations = [
        migrations.AddField(
            model_name="auditentry", name="alg", field=models.CharField(default="sha256", max_length=16)
        ),
        migrations.AlterField(
            model_name="auditentry", name="alg", field=models.CharField(default="hmac-sha256", max_length=16)
        ),
    ]
