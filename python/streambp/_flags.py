"""Keyword arguments as command-line flags: plan(budget="80GiB") is `--budget 80GiB`."""


def to_flags(kwargs):
    """`name=value` -> ["--name", "value"] (underscores become dashes); True -> the bare flag,
    False or None -> nothing, a list -> one flag per item. The command checks them, so an
    unknown or malformed flag is its own one-line streambp.Error."""
    argv = []
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            for v in value:
                argv += [flag, str(v)]
        else:
            argv += [flag, str(value)]
    return argv
