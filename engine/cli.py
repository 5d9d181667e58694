import click
@click.group()
def main(): "resenv"
