#!/bin/sh
# tunectl's batch script for one job array: task i runs attempt script
# t<i>.sh of the batch directory and writes its report to t<i>.frames.
#
# Copy this file, change what your cluster needs (modules, scratch, extra
# #SBATCH lines) and point the inventory's `batch_template:` at it. It is a
# minijinja template; values are already safe to paste where they are used
# here ({{ batch_dir_sh }} is shell-quoted). Keep the lines tunectl relies on:
# --job-name and --comment (how tunectl finds its own jobs again),
# --array, --output, --no-requeue (tunectl re-queues lost trials itself) and
# the final exec line.
#SBATCH --job-name={{ job_name }}
#SBATCH --comment={{ comment }}
#SBATCH --array={{ array }}
#SBATCH --output={{ batch_dir }}/slurm-%A_%a.out
#SBATCH --no-requeue
{%- if time_limit %}
#SBATCH --time={{ time_limit }}
{%- endif %}
{%- if partition %}
#SBATCH --partition={{ partition }}
{%- endif %}
{%- if account %}
#SBATCH --account={{ account }}
{%- endif %}
{%- if qos %}
#SBATCH --qos={{ qos }}
{%- endif %}
{%- if gres %}
#SBATCH --gres={{ gres }}
{%- endif %}
{%- if constraint %}
#SBATCH --constraint={{ constraint }}
{%- endif %}
{%- for arg in sbatch_args %}
#SBATCH {{ arg }}
{%- endfor %}

exec /bin/sh {{ batch_dir_sh }}/t"$SLURM_ARRAY_TASK_ID".sh >{{ batch_dir_sh }}/t"$SLURM_ARRAY_TASK_ID".frames 2>{{ batch_dir_sh }}/t"$SLURM_ARRAY_TASK_ID".err
