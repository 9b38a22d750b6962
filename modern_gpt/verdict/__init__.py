"""The verdict engine, a library of its own: a table's Design, its summary rows and their statistics. Also judge,
for anyone's runs. pandas and numpy, never torch: nothing here knows how a run was trained."""
