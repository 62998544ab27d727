"""The similarity heat map `simoe-server similarity --plot` writes (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from schemas import BadInputError
from schemas.errors import output_folder


def check_plot_path(path: Path) -> None:
    """A `--plot` file we can write, or one line saying what to do (exit 2)."""
    if path.is_dir():
        raise BadInputError(
            f"--plot {path} is a folder; give a file name, e.g. {path / 'similarity.png'}"
        )
    output_folder(path.parent, f"--plot {path}: its folder")


def write_heatmap(path: Path, names: list[str], matrix: Any, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = max(4.0, 0.6 * len(names) + 2)
    fig, ax = plt.subplots(figsize=(size, size * 0.85))
    image = ax.imshow(matrix, vmin=-1, vmax=1, cmap="RdBu_r")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_yticks(range(len(names)), names)
    for i in range(len(names)):
        for j in range(len(names)):
            ax.text(j, i, f"{matrix[i][j]:.2f}", ha="center", va="center", fontsize=8)
    fig.colorbar(image, ax=ax, label="cos(z_i, z_j)")
    ax.set_title(title)
    fig.tight_layout()
    check_plot_path(path)
    try:
        fig.savefig(path, dpi=120)
    except OSError as exc:
        reason = (exc.strerror or type(exc).__name__).lower()
        raise BadInputError(
            f"--plot {path}: cannot write it ({reason}); give another path"
        ) from None
    finally:
        plt.close(fig)
