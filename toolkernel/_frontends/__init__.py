"""Front ends: the IPython magics, the person's answers, direct calls, JupyterLab's kernel side, serve, lint."""
