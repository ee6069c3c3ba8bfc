"""The "operators" group: every permission an operator needs to act on packages and nodes."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

GROUP = "operators"
PERMISSIONS = {
    "package": ["track_package", "change_package", "delete_package", "reingest_package",
                "view_private_package", "view_package"],
    "node": ["add_node", "change_node", "view_node"],
    "actionlog": ["view_actionlog"],
}


def create_operators(apps, schema_editor):
    # Permissions are normally created after all migrations ran (post_migrate); make them exist now.
    app_config = apps.get_app_config("packages_app")
    app_config.models_module = True
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name=GROUP)
    for model, codenames in PERMISSIONS.items():
        perms = Permission.objects.filter(
            content_type__app_label="packages_app", content_type__model=model, codename__in=codenames
        )
        group.permissions.add(*perms)


def remove_operators(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name=GROUP).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("packages_app", "0005_access14_accounts"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_operators, remove_operators)]
